import { expect, test } from "../../helpers/fixtures";
import { Api, ready } from "../../helpers/api";

test("the board: a workflow switcher, columns per step, a card moved to another step stays there", async ({ page, request }) => {
  const api = new Api(request);
  const name = `Release ${Date.now()}`;
  const workflow = await api.createWorkflow(name, ["Draft", "Review", "Shipped"]);
  const task = await api.createTask(`Board card ${Date.now()}`, { workflow_id: workflow.id, prompt: "/e2e:clarification" });
  const [draft, review] = workflow.steps;

  await page.goto("/");
  await ready(page);
  await page.getByTestId("board-workflow").selectOption({ label: name });
  const columns = page.getByTestId("board-column");
  await expect(columns).toHaveCount(3);
  const card = page.locator(`[data-testid="board-card"][data-task-id="${task.id}"]`);
  await expect(page.locator(`[data-testid="board-column"][data-step-id="${draft.id}"]`).locator(card)).toBeVisible();
  // P2: the card shows the pending icon.
  await expect(card.getByTestId("task-state-waiting-for-input")).toBeVisible();
  await expect(card).toContainText("Waiting for you");

  await card.getByTestId("board-card-move").selectOption(review.id);
  await expect(page.locator(`[data-testid="board-column"][data-step-id="${review.id}"]`).locator(card)).toBeVisible();
  await expect(page.locator(`[data-testid="board-column"][data-step-id="${draft.id}"]`).locator(card)).toHaveCount(0);
  expect((await api.task(task.id) as unknown as { step_id: string }).step_id).toBe(review.id);

  await page.reload();
  await ready(page);
  await page.getByTestId("board-workflow").selectOption({ label: name });
  await expect(page.locator(`[data-testid="board-column"][data-step-id="${review.id}"]`).locator(card)).toBeVisible();
  // A card opens its task on the session that owns the question (N1).
  await card.locator(".card-title").click();
  await expect(page).toHaveURL(new RegExp(`/t/${task.id}\\?session=${task.primary_session_id}`));
  await expect(page.getByTestId("clarification-overlay")).toBeVisible();
});
