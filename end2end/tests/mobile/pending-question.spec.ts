import { expect, test } from "../../helpers/fixtures";
import { Api, ready } from "../../helpers/api";

test.use({ viewport: { width: 360, height: 740 } });

/** No element makes the page scroll sideways. */
async function noHorizontalOverflow(page: import("@playwright/test").Page) {
  const { scroll, client } = await page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth,
    client: document.documentElement.clientWidth,
  }));
  expect(scroll).toBeLessThanOrEqual(client);
}

test("N1 on a phone at 360 px: the drawer's tap opens the secondary session that owns the question", async ({ page, request }) => {
  const api = new Api(request);
  const elsewhere = await api.createTask("Phone: another task", { prompt: "/e2e:simple-message" });
  const task = await api.createTask("Phone: secondary owns it", { prompt: "/e2e:simple-message" });
  await api.waitTurnsDone(task.primary_session_id!, 1);
  const secondary = await api.addSession(task.id, "/e2e:clarification");
  await expect.poll(async () => (await api.task(task.id)).task_pending_action).toBe("clarification");

  await page.goto(`/t/${elsewhere.id}`);
  await ready(page);
  await noHorizontalOverflow(page);
  await page.getByTestId("mobile-session-menu").tap();
  const drawer = page.getByRole("dialog", { name: "Tasks" });
  await expect(drawer).toBeVisible();
  await noHorizontalOverflow(page);
  const row = drawer.locator(`[data-testid="sidebar-task-item"][data-task-id="${task.id}"]`);
  await expect(row.getByTestId("task-state-waiting-for-input")).toBeVisible();
  await row.tap();

  await expect(page).toHaveURL(new RegExp(`/t/${task.id}\\?session=${secondary.id}`));
  await expect(page.getByRole("dialog", { name: "Tasks" })).toHaveCount(0);
  await expect(page.getByRole("heading", { name: "Phone: secondary owns it" })).toBeVisible();
  await expect(page.getByTestId("clarification-overlay")).toContainText("Which database should we use for this project?");
  await noHorizontalOverflow(page);

  // The board at 360 px collapses to a list without sideways scrolling.
  await page.goto("/");
  await ready(page);
  await expect(page.getByTestId("board-column").first()).toBeVisible();
  await noHorizontalOverflow(page);
});
