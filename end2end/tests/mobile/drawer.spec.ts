import { expect, test } from "../../helpers/fixtures";
import { Api, SHORT_TIMEOUT } from "../../helpers/api";

test("N1 on a phone: the drawer opens the session that owns the question, then closes", async ({ page, request }) => {
  const api = new Api(request);
  const task = await api.createTask("Drawer owner", { prompt: SHORT_TIMEOUT });
  const owner = task.primary_session_id!;
  await api.waitTurnsDone(owner, 1);
  const newer = await api.addSession(task.id, "/e2e:simple-message");
  await api.waitTurnsDone(newer.id, 1);

  await page.goto("/");
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  await page.getByTestId("mobile-session-menu").tap();
  const drawer = page.getByRole("dialog", { name: "Tasks" });
  await expect(drawer).toBeVisible();
  const row = drawer.locator(`[data-testid="sidebar-task-item"][data-task-id="${task.id}"]`);
  await expect(row.getByTestId("task-state-waiting-for-input")).toBeVisible();
  await row.tap();
  await expect(page).toHaveURL(new RegExp(`/t/${task.id}\\?session=${owner}`));
  await expect(page.getByTestId("chat-panel")).toHaveAttribute("data-active-session-id", owner);
  await expect(page.getByRole("dialog", { name: "Tasks" })).toHaveCount(0);
  await expect(page.getByTestId("clarification-overlay")).toBeVisible();
});
