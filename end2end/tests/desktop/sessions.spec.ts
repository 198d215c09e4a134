import { expect, test } from "../../helpers/fixtures";
import { Api, ready } from "../../helpers/api";

test("session-new starts another session with its first prompt; tabs carry human labels", async ({ page, request }) => {
  const api = new Api(request);
  const task = await api.createTask(`Sessions ${Date.now()}`, { prompt: "/e2e:simple-message" });
  await api.waitTurnsDone(task.primary_session_id!, 1);
  await page.goto(`/t/${task.id}?session=${task.primary_session_id}`);
  await ready(page);
  const first = page.locator(`[data-testid="session-tab"][data-session-id="${task.primary_session_id}"]`);
  await expect(first).toContainText("Idle");
  await expect(first).not.toContainText("waiting_for_input");

  await page.getByTestId("session-new").click();
  await page.getByLabel("Agent profile").selectOption({ label: "mock (bundled)" });
  await page.getByLabel("First prompt of the new session").fill("/e2e:clarification");
  await page.getByTestId("session-new-start").click();
  await expect(page).toHaveURL(/session=/);
  await expect(page).not.toHaveURL(new RegExp(`session=${task.primary_session_id}`));
  await expect(page.getByTestId("session-tab")).toHaveCount(2);
  const second = page.locator('[data-testid="session-tab"][data-pending="clarification"]');
  await expect(second).toContainText("Waiting for your answer");
  await expect(page.getByTestId("clarification-overlay")).toBeVisible();
});

test("session-cancel stops the open turn", async ({ page, request }) => {
  const api = new Api(request);
  const task = await api.createTask(`Cancel ${Date.now()}`, { prompt: 'e2e:message("Starting a long job")\ne2e:delay(60000)\ne2e:message("never said")' });
  const session = task.primary_session_id!;
  await page.goto(`/t/${task.id}?session=${session}`);
  await ready(page);
  await expect(page.getByTestId("agent-markdown").filter({ hasText: "Starting a long job" })).toBeVisible();
  const cancel = page.getByTestId("session-cancel");
  await expect(cancel).toBeEnabled();
  await cancel.click();
  await api.waitTurnsDone(session, 1);
  await expect(cancel).toBeDisabled();
  await expect(page.locator(`[data-testid="session-tab"][data-session-id="${session}"]`)).not.toContainText("Working…");
  await expect(page.getByTestId("agent-markdown").filter({ hasText: "never said" })).toHaveCount(0);
});
