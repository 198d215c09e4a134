import * as fs from "node:fs";
import * as path from "node:path";
import { expect, test } from "../../helpers/fixtures";
import { gitRepo } from "../../helpers/git";
import { dataDir } from "../../playwright.config";

// W2 and W4 on a phone: the drawer's new-task form offers the repositories too, and Changes
// shows the file list, then the diff.
test("W2 on a phone: a task created from the drawer on a repository works in its own worktree", async ({ page, request }) => {
  const name = `phone project ${Date.now()}`;
  const added = await request.post("/api/v1/repositories", { data: { path: gitRepo("turnstile-e2e-phone-"), name } });
  expect(added.status(), await added.text()).toBe(200);

  await page.goto("/");
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  await page.getByTestId("mobile-session-menu").tap();
  const drawer = page.getByRole("dialog", { name: "Tasks" });
  await expect(drawer).toBeVisible();
  await drawer.getByTestId("new-task-repository").selectOption({ label: name });
  await drawer.getByLabel("Task title").fill(`Phone worktree ${Date.now()}`);
  await drawer.getByLabel("First prompt").fill('e2e:write("phone.txt", "from a phone")');
  await drawer.getByTestId("new-task-submit").tap();
  await expect(page).toHaveURL(/\/t\/[^/?]+/);
  // The drawer closes on the new task, as it does on a picked one.
  await expect(page.getByRole("dialog", { name: "Tasks" })).toHaveCount(0);
  const taskId = new URL(page.url()).pathname.split("/")[2];
  await expect(page.getByTestId("chat-message").filter({ hasText: "Wrote phone.txt" })).toBeVisible();
  expect(fs.readFileSync(path.join(dataDir, "worktrees", taskId, "phone.txt"), "utf8")).toBe("from a phone");

  // W4 on a phone: the file list, then the diff under it.
  await page.getByTestId("changes-open").tap();
  const file = page.locator('[data-testid="changed-file"][data-path="phone.txt"]');
  await file.tap();
  const diff = page.getByTestId("file-diff");
  await expect(diff.locator('[data-kind="add"]')).toContainText("from a phone");
  const [list, shown] = [await file.boundingBox(), await diff.boundingBox()];
  expect(shown!.y, "the diff comes under the list").toBeGreaterThan(list!.y);
  expect(shown!.width, "and fits the screen").toBeLessThanOrEqual(page.viewportSize()!.width);
});
