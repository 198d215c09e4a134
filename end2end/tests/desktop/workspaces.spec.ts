import * as fs from "node:fs";
import * as path from "node:path";
import { expect, test } from "../../helpers/fixtures";
import { gitRepo } from "../../helpers/git";
import { dataDir } from "../../playwright.config";

// W1–W4: a repository added on the settings page is offered by the new-task form; the task's
// agent works in a worktree of its own, never in the checkout; Changes shows what it did.
// The refused directory's 422 is logged by the browser.
test.use({ allowedConsole: [/status of 422/] });

test("W1–W4: a repository added in Settings is chosen for a new task, whose agent writes in its own worktree, shown under Changes", async ({ page }) => {
  const repo = gitRepo("turnstile-e2e-repo-");
  const name = `project ${Date.now()}`;
  await page.goto("/settings");
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  // A directory outside the workspace roots is refused, with the reason.
  await page.getByTestId("repository-path").fill("/etc");
  await page.getByTestId("repository-add").click();
  await expect(page.getByTestId("repository-error")).toContainText("not under a workspace root");
  await page.getByTestId("repository-path").fill(repo);
  await page.getByTestId("repository-name").fill(name);
  await page.getByTestId("repository-add").click();
  const row = page.locator(`[data-testid="repository"][data-repository-name="${name}"]`);
  await expect(row).toContainText("tasks branch off main");
  await expect(row).toContainText(repo);

  await page.goto("/");
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  const choice = page.getByTestId("new-task-repository");
  await expect(choice.locator("option", { hasText: name })).toHaveCount(1);
  await choice.selectOption({ label: name });
  await page.getByLabel("Task title").fill(`Worktree ${Date.now()}`);
  await page.getByLabel("First prompt").fill('e2e:write("notes.txt", "from the agent")');
  await page.getByTestId("new-task-submit").click();
  await expect(page).toHaveURL(/\/t\/[^/?]+/);
  const taskId = new URL(page.url()).pathname.split("/")[2];
  await expect(page.getByTestId("chat-message").filter({ hasText: "Wrote notes.txt" })).toBeVisible();
  expect(fs.readFileSync(path.join(dataDir, "worktrees", taskId, "notes.txt"), "utf8")).toBe("from the agent");
  expect(fs.existsSync(path.join(repo, "notes.txt")), "the checkout is untouched").toBe(false);

  // W4: Changes lists the file with its counts and shows its diff; a later turn's change
  // appears when that turn ends.
  await page.getByTestId("changes-open").click();
  const notes = page.locator('[data-testid="changed-file"][data-path="notes.txt"]');
  await expect(notes).toHaveAttribute("data-status", "added");
  await expect(notes).toContainText("+1");
  await notes.click();
  const added = page.getByTestId("file-diff").locator('[data-testid="diff-line"][data-kind="add"]');
  await expect(added).toHaveCount(1);
  await expect(added).toContainText("from the agent");
  await page.getByTestId("prompt-input").fill('e2e:write("README.md", "changed by the agent")');
  await page.getByTestId("prompt-send").click();
  const readme = page.locator('[data-testid="changed-file"][data-path="README.md"]');
  await expect(readme).toHaveAttribute("data-status", "modified");
  await readme.click();
  await expect(page.getByTestId("file-diff").locator('[data-kind="del"]')).toContainText("hello");
  await expect(page.getByTestId("file-diff").locator('[data-kind="add"]')).toContainText("changed by the agent");
});
