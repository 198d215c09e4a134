import { expect, test } from "../../helpers/fixtures";
import { Api } from "../../helpers/api";

// The E2E chain works: server-rendered sidebar with a task from the repository, then hydration.
test("the sidebar lists a task created through the repository and the page hydrates", async ({ page, request }) => {
  const title = `Smoke task ${Date.now()}`;
  const task = await new Api(request).createTask(title);
  const errors: string[] = [];
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(e.message));

  await page.goto("/");
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  await expect(page.locator("body")).toHaveAttribute("data-ws", "open");
  const row = page.locator(`[data-testid="sidebar-task-item"][data-task-id="${task.id}"]`);
  await expect(row).toHaveText(title);
  await expect(row).toHaveAttribute("href", `/t/${task.id}`);
  // A clean task shows no pending icon.
  await expect(row.getByTestId("task-state-waiting-for-input")).toHaveCount(0);
  // Hydration mismatches and panics surface as console errors.
  expect(errors).toEqual([]);
});

test("the server renders the task list without JavaScript", async ({ browser, request }) => {
  const title = `No-JS task ${Date.now()}`;
  const task = await new Api(request).createTask(title);
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  await page.goto("/");
  await expect(page.locator(`[data-testid="sidebar-task-item"][data-task-id="${task.id}"]`)).toHaveText(title);
  await context.close();
});
