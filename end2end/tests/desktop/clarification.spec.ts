import { expect, test } from "../../helpers/fixtures";
import { Api, SHORT_TIMEOUT } from "../../helpers/api";

test("a task created in the UI asks its question; answering it continues the agent", async ({ page }) => {
  await page.goto("/");
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  const title = `Pick a database ${Date.now()}`;
  await page.getByLabel("Task title").fill(title);
  await page.getByLabel("First prompt").fill("/e2e:clarification");
  await page.getByTestId("new-task-submit").click();

  // The task opens on the session that owns the question (N1), shown in the URL.
  await expect(page).toHaveURL(/\/t\/[^/?]+\?session=/);
  const overlay = page.getByTestId("clarification-overlay");
  await expect(overlay).toContainText("Which database should we use for this project?");
  const row = page.locator('[data-testid="sidebar-task-item"]', { hasText: title });
  await expect(row.getByTestId("task-state-waiting-for-input")).toBeVisible();

  await page.getByTestId("clarification-option-sqlite").click();
  await expect(overlay).toHaveCount(0);
  await expect(page.getByTestId("chat-message").filter({ hasText: 'You answered: {"db":{"selected_option":"sqlite"}}' })).toBeVisible();
  await expect(row.getByTestId("task-state-waiting-for-input")).toHaveCount(0);
});

test("N1: clicking a task opens the session that owns its question, not the newest", async ({ page, request }) => {
  const api = new Api(request);
  const task = await api.createTask("Owner test", { prompt: SHORT_TIMEOUT });
  const owner = task.primary_session_id!;
  await api.waitTurnsDone(owner, 1);
  const newer = await api.addSession(task.id, "/e2e:simple-message");
  await api.waitTurnsDone(newer.id, 1);

  await page.goto("/");
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  await page.locator(`[data-testid="sidebar-task-item"][data-task-id="${task.id}"]`).click();
  await expect(page).toHaveURL(new RegExp(`session=${owner}`));
  await expect(page.getByTestId("chat-panel")).toHaveAttribute("data-active-session-id", owner);
  await expect(page.locator(`[data-testid="session-tab"][data-session-id="${owner}"]`)).toHaveAttribute("data-pending", "clarification");
  // Detached: answerable, with the notice (N5); Escape only collapses.
  const overlay = page.getByTestId("clarification-overlay");
  await expect(overlay.getByTestId("clarification-deferred-notice")).toBeVisible();
  await overlay.press("Escape");
  await expect(overlay).toHaveCount(0);
  await page.getByRole("button", { name: "Show the agent's question" }).click();
  await page.getByTestId("clarification-custom-input").fill("sqlite, please");
  await page.getByTestId("clarification-submit").click();
  await expect(page.getByTestId("chat-message").filter({ hasText: "sqlite, please" }).first()).toBeVisible();
  await expect(overlay).toHaveCount(0);
});

test("Skip rejects the question and the overlay closes", async ({ page, request }) => {
  const api = new Api(request);
  const task = await api.createTask("Skip test", { prompt: "/e2e:clarification-multi" });
  await page.goto(`/t/${task.id}`);
  const overlay = page.getByTestId("clarification-overlay");
  // One question at a time (N5 stepper): the first of three.
  await expect(overlay).toContainText("Question 1 of 3");
  await expect(overlay).toContainText("Which database should we use for this project?");
  await page.getByTestId("clarification-skip").click();
  await expect(overlay).toHaveCount(0);
  await expect(page.getByTestId("chat-message").filter({ hasText: '"rejected":true' })).toBeVisible();
});

test("N1: a clean task reopens the session last viewed (remembered → primary → first)", async ({ page, request }) => {
  const api = new Api(request);
  const task = await api.createTask("Remembered", { prompt: "/e2e:simple-message" });
  const primary = task.primary_session_id!;
  await api.waitTurnsDone(primary, 1);
  const other = await api.addSession(task.id, "/e2e:simple-message");
  await api.waitTurnsDone(other.id, 1);

  // Without a remembered session, the primary opens.
  await page.goto(`/t/${task.id}`);
  await expect(page.getByTestId("chat-panel")).toHaveAttribute("data-active-session-id", primary);
  // View the other session, leave, click the task again: the other session reopens.
  await page.locator(`[data-testid="session-tab"][data-session-id="${other.id}"]`).click();
  await expect(page.getByTestId("chat-panel")).toHaveAttribute("data-active-session-id", other.id);
  await page.goto("/");
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  await page.locator(`[data-testid="sidebar-task-item"][data-task-id="${task.id}"]`).click();
  await expect(page).toHaveURL(new RegExp(`session=${other.id}`));
});
