import { expect, test } from "@playwright/test";
import { Api } from "../../helpers/api";

test("on a phone the page hydrates and lists tasks", async ({ page, request }) => {
  const title = `Phone task ${Date.now()}`;
  const task = await new Api(request).createTask(title);
  await page.goto("/");
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  await expect(page.locator(`[data-testid="sidebar-task-item"][data-task-id="${task.id}"]`)).toHaveText(title);
});
