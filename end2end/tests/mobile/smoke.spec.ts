import { expect, test } from "../../helpers/fixtures";
import { Api } from "../../helpers/api";

test("on a phone the page hydrates and the drawer lists tasks", async ({ page, request }) => {
  const title = `Phone task ${Date.now()}`;
  const task = await new Api(request).createTask(title);
  await page.goto("/");
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  // The desktop sidebar is hidden on phones; the drawer shows the same list.
  await expect(page.locator(`[data-testid="sidebar-task-item"][data-task-id="${task.id}"]`)).toBeHidden();
  await page.getByTestId("mobile-session-menu").tap();
  await expect(page.getByRole("dialog", { name: "Tasks" }).locator(`[data-task-id="${task.id}"]`)).toHaveText(title);
});
