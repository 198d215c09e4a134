import { expect, test } from "../../helpers/fixtures";
import { Api, question, ready } from "../../helpers/api";

// The seed plan's scenarios (reference/seed-plan.md, "E2E Tests"): the API only arranges
// sessions and turns; every outcome is asserted in the UI and again after a reload.

test("L5/L16: an older detached question, a newer one skipped, a later turn, a reload — nothing comes back", async ({ page, request }) => {
  const api = new Api(request);
  const old = question("old", "The older question?");
  const task = await api.createTask("Superseded questions", { prompt: `e2e:ask-timeout(1000, ${JSON.stringify(old)})` });
  const session = task.primary_session_id!;
  await api.waitTurnsDone(session, 1);

  await page.goto(`/t/${task.id}?session=${session}`);
  await ready(page);
  const overlay = page.getByTestId("clarification-overlay");
  const row = page.locator(`.sidebar [data-testid="sidebar-task-item"][data-task-id="${task.id}"]`);
  // The detached question is the current one (N5 notice) …
  await expect(overlay).toContainText("The older question?");
  await expect(overlay.getByTestId("clarification-deferred-notice")).toBeVisible();

  // … until a newer turn asks its own: the older one is superseded (L16).
  await api.prompt(session, `e2e:ask(${JSON.stringify(question("new", "The newer question?"))})`);
  await expect(overlay).toContainText("The newer question?");
  await expect(overlay).not.toContainText("The older question?");
  await expect(row.getByTestId("task-state-waiting-for-input")).toBeVisible();

  await page.getByTestId("clarification-skip").click();
  await expect(overlay).toHaveCount(0);
  await expect(row.getByTestId("task-state-waiting-for-input")).toHaveCount(0);
  await api.waitTurnsDone(session, 2);

  // A later turn completes: the superseded question is not re-armed.
  await api.prompt(session, "/e2e:simple-message");
  await api.waitTurnsDone(session, 3);
  await expect(page.getByTestId("chat-message").last()).toBeVisible();
  await expect(overlay).toHaveCount(0);
  await expect(page.getByTestId("clarification-reopen")).toHaveCount(0);
  await expect(row.getByTestId("task-state-waiting-for-input")).toHaveCount(0);
  await expect(page.locator(`[data-testid="session-tab"][data-session-id="${session}"]`)).toHaveAttribute("data-pending", "");

  await page.reload();
  await ready(page);
  await expect(page.getByTestId("chat-message").filter({ hasText: "The newer question?" }).first()).toBeVisible();
  await expect(overlay).toHaveCount(0);
  await expect(row.getByTestId("task-state-waiting-for-input")).toHaveCount(0);
});

test("N1: a secondary session owns the only question — a click from another task opens it", async ({ page, request }) => {
  const api = new Api(request);
  const elsewhere = await api.createTask("Some other task", { prompt: "/e2e:simple-message" });
  const task = await api.createTask("Secondary owns it", { prompt: "/e2e:simple-message" });
  await api.waitTurnsDone(task.primary_session_id!, 1);
  const secondary = await api.addSession(task.id, "/e2e:clarification");
  await expect.poll(async () => (await api.task(task.id)).task_pending_action).toBe("clarification");

  await page.goto(`/t/${elsewhere.id}`);
  await ready(page);
  await page.locator(`.sidebar [data-testid="sidebar-task-item"][data-task-id="${task.id}"]`).click();
  await expect(page).toHaveURL(new RegExp(`/t/${task.id}\\?session=${secondary.id}`));
  await expect(page.getByTestId("chat-panel")).toHaveAttribute("data-active-session-id", secondary.id);
  await expect(page.getByRole("heading", { name: "Secondary owns it" })).toBeVisible();
  await expect(page.getByTestId("clarification-overlay")).toContainText("Which database should we use for this project?");
  await expect(page.locator(`[data-testid="session-tab"][data-session-id="${secondary.id}"]`)).toHaveAttribute("data-pending", "clarification");

  await page.reload();
  await ready(page);
  await expect(page.getByTestId("chat-panel")).toHaveAttribute("data-active-session-id", secondary.id);
  await expect(page.getByTestId("clarification-overlay")).toBeVisible();
});

test("L17/N5: a detached current-turn question takes a custom answer and the agent continues once", async ({ page, request }) => {
  const api = new Api(request);
  const q = question("db", "Which database, finally?", ["postgresql", "sqlite"]);
  const task = await api.createTask("Detached answer", { prompt: `e2e:ask-timeout(1000, ${JSON.stringify(q)})` });
  const session = task.primary_session_id!;
  await api.waitTurnsDone(session, 1);

  await page.goto("/");
  await ready(page);
  const row = page.locator(`.sidebar [data-testid="sidebar-task-item"][data-task-id="${task.id}"]`);
  await expect(row.getByTestId("task-state-waiting-for-input")).toBeVisible();
  await row.click();
  const overlay = page.getByTestId("clarification-overlay");
  await expect(overlay.getByTestId("clarification-deferred-notice")).toBeVisible();
  await page.getByTestId("clarification-custom-input").fill("SQLite with WAL, please");
  await page.getByTestId("clarification-submit").click();
  await expect(overlay).toHaveCount(0);
  const resumed = page.getByTestId("chat-message").filter({ hasText: "Thanks, continuing with your answer" });
  await expect(resumed).toHaveCount(1);
  await expect(resumed).toContainText("SQLite with WAL, please");
  await expect(row.getByTestId("task-state-waiting-for-input")).toHaveCount(0);
  await api.waitTurnsDone(session, 2);

  await page.reload();
  await ready(page);
  await expect(page.getByTestId("chat-message").filter({ hasText: "Thanks, continuing with your answer" })).toHaveCount(1);
  await expect(overlay).toHaveCount(0);
  await expect(row.getByTestId("task-state-waiting-for-input")).toHaveCount(0);
});
