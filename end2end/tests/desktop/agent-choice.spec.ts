import * as path from "node:path";
import { expect, test } from "../../helpers/fixtures";

// A5: the new-task form chooses the agent profile; the last one chosen is the default.
test("A5: a task created from the sidebar runs the agent chosen there, which stays the default", async ({ page, request }) => {
  const name = `second mock ${Date.now()}`;
  const created = await request.post("/api/v1/agent-profiles", {
    data: { name, command: path.resolve(__dirname, "../../../target/debug/mock_agent") },
  });
  expect(created.status(), await created.text()).toBe(200);
  const profile = await created.json();

  await page.goto("/");
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  const agent = page.getByTestId("new-task-agent");
  await expect(agent.locator("option", { hasText: name })).toHaveCount(1);
  await agent.selectOption({ label: name });
  await page.getByLabel("Task title").fill(`Chosen agent ${Date.now()}`);
  await page.getByLabel("First prompt").fill("/e2e:simple-message");
  await page.getByTestId("new-task-submit").click();
  await expect(page).toHaveURL(/\/t\/[^/?]+/);
  const taskId = new URL(page.url()).pathname.split("/")[2];
  const sessions = await (await request.get(`/api/v1/tasks/${taskId}/sessions`)).json();
  expect(sessions.sessions[0].agent_profile_id).toBe(profile.id);
  await expect(page.getByTestId("chat-message").filter({ hasText: "Hello! This is a simple reply" })).toBeVisible();

  // The next visit offers the same agent first.
  await page.goto("/");
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  await expect(page.getByTestId("new-task-agent")).toHaveValue(profile.id);
});
