import { expect, test } from "../../helpers/fixtures";

test("settings: add an agent profile and edit it; environment values are never shown", async ({ page, request }) => {
  const name = `my-agent-${Date.now()}`;
  await page.goto("/settings");
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  await expect(page.locator('[data-testid="agent-profile"][data-profile-name="mock"]')).toBeVisible();
  await page.getByTestId("agent-profile-add").click();
  const form = page.getByRole("form", { name: "Agent profile" });
  await form.getByLabel("Name", { exact: true }).fill(name);
  await form.getByLabel("Command", { exact: true }).fill("/usr/local/bin/my-agent");
  await form.getByLabel("Arguments (one per line)").fill("--acp\n--quiet");
  await form.getByLabel("Add variables (NAME=value, one per line)").fill("MY_AGENT_KEY=super-secret-value");
  await form.getByLabel("Auth method (optional)").fill("my-login");
  await page.getByTestId("agent-profile-save").click();

  const row = page.locator(`[data-testid="agent-profile"][data-profile-name="${name}"]`);
  await expect(row).toContainText("/usr/local/bin/my-agent --acp --quiet");
  await expect(row).toContainText("env: MY_AGENT_KEY");
  // A4: the method the agent is asked to authenticate with.
  await expect(row).toContainText("logs in with my-login");
  await expect(page.locator("body")).not.toContainText("super-secret-value");

  // A6: a new command keeps a value only when it is entered again (the form says so).
  await row.getByRole("button", { name: "Edit" }).click();
  await expect(page.getByLabel("New value for MY_AGENT_KEY")).toHaveValue("");
  await expect(form).toContainText("A new command or new arguments clear these values");
  await form.getByLabel("Command", { exact: true }).fill("/opt/agents/my-agent");
  await page.getByLabel("New value for MY_AGENT_KEY").fill("another-secret-value");
  await page.getByTestId("agent-profile-save").click();
  await expect(row).toContainText("/opt/agents/my-agent --acp --quiet");
  await expect(row).toContainText("env: MY_AGENT_KEY");
  await row.getByRole("button", { name: "Edit" }).click();
  await form.getByLabel("Command", { exact: true }).fill("/opt/agents/other-agent");
  await expect(form.getByLabel("Auth method (optional)")).toHaveValue("my-login");
  await form.getByLabel("Auth method (optional)").fill("");
  await page.getByTestId("agent-profile-save").click();
  await expect(row).toContainText("/opt/agents/other-agent --acp --quiet");
  await expect(row).not.toContainText("env: MY_AGENT_KEY");
  await expect(row).not.toContainText("logs in with");

  const listed = await (await request.get("/api/v1/agent-profiles")).text();
  expect(listed).toContain(name);
  expect(listed).not.toContain("super-secret-value");
  expect(listed).not.toContain("another-secret-value");
  // The new profile is offered when starting a session.
});
