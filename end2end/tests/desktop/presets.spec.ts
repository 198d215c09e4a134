import { expect, test } from "../../helpers/fixtures";

test("A1/A2/A5: a profile added from the mock preset is checked and runs a task chosen in the sidebar", async ({ page, request }) => {
  await page.goto("/settings");
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  // A preset that is not installed says how to install it; one that is shows its command.
  const presets: { id: string; found: boolean; command: string; install?: string }[] = (await (await request.get("/api/v1/agent-presets")).json()).agent_presets;
  const opencode = presets.find((p) => p.id === "opencode")!;
  await expect(page.locator('[data-testid="agent-preset"][data-preset-id="opencode"]')).toContainText(opencode.found ? opencode.command : opencode.install!);

  await page.getByTestId("agent-preset-use-mock").click();
  const form = page.getByRole("form", { name: "Agent profile" });
  await expect(form.getByLabel("Name", { exact: true })).toHaveValue("Mock agent (bundled)");
  await expect(form.getByLabel("Command", { exact: true })).toHaveValue(/mock_agent$/);
  const name = `preset mock ${Date.now()}`;
  await form.getByLabel("Name", { exact: true }).fill(name);
  await page.getByTestId("agent-profile-save").click();

  const row = page.locator(`[data-testid="agent-profile"][data-profile-name="${name}"]`);
  await row.getByTestId("agent-profile-check").click();
  await expect(row.getByTestId("agent-profile-check-result")).toHaveText(/^OK: turnstile-mock-agent \S+ \(resumes sessions, MCP over HTTP\)$/);

  await page.goto("/");
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  await expect(page.getByTestId("new-task-agent").locator("option", { hasText: name })).toHaveCount(1);
  await page.getByTestId("new-task-agent").selectOption({ label: name });
  await page.getByLabel("Task title").fill(`From a preset ${Date.now()}`);
  await page.getByLabel("First prompt").fill("/e2e:simple-message");
  await page.getByTestId("new-task-submit").click();
  await expect(page.getByTestId("chat-message").filter({ hasText: "Hello! This is a simple reply" })).toBeVisible();
});
