import { expect, test } from "../../helpers/fixtures";
import { Api, failRefetchOnReconnect, gateSocket, ready, serverCalls } from "../../helpers/api";

test("N6: a permission request is answered by a click; the prompt and the icon clear", async ({ page, request }) => {
  const api = new Api(request);
  const task = await api.createTask(`Permission ${Date.now()}`, { prompt: "/e2e:permission" });
  await page.goto("/");
  await ready(page);
  const row = page.locator(`.sidebar [data-task-id="${task.id}"]`);
  await expect(row.getByTestId("task-state-pending-permission")).toBeVisible();
  await row.click();
  const prompt = page.getByTestId("permission-prompt");
  await expect(prompt).toContainText("Run the test suite");
  await expect(page.locator(`[data-testid="session-tab"][data-session-id="${task.primary_session_id}"]`)).toHaveAttribute("data-pending", "permission");
  await page.getByTestId("permission-option-allow").click();
  await expect(prompt).toHaveCount(0);
  await expect(page.getByTestId("chat-message").filter({ hasText: "Permission outcome: selected allow" })).toBeVisible();
  await expect(row.getByTestId("task-state-pending-permission")).toHaveCount(0);

  await page.reload();
  await ready(page);
  await expect(page.getByTestId("permission-prompt")).toHaveCount(0);
  await expect(row.getByTestId("task-state-pending-permission")).toHaveCount(0);
});

test("N6: a request whose turn was cancelled shows as cancelled when answered", async ({ page, request }) => {
  const api = new Api(request);
  const task = await api.createTask(`Permission gone ${Date.now()}`, { prompt: "/e2e:permission" });
  const gate = await gateSocket(page);
  const loads = serverCalls(page, "pending_permission");
  await page.goto(`/t/${task.id}?session=${task.primary_session_id}`);
  await ready(page);
  await expect(page.getByTestId("permission-prompt")).toBeVisible();
  // The refetch after the socket opened has landed (it once was still in flight at the cancel
  // and rightly found the request gone). This tab hears nothing more; the turn is cancelled
  // meanwhile (N6 cancels its requests).
  await loads.settled(2);
  gate.held = true;
  const cancelled = await request.post(`/api/v1/sessions/${task.primary_session_id}/cancel`);
  expect(cancelled.status()).toBe(200);
  await api.waitTurnsDone(task.primary_session_id!, 1);

  await page.getByTestId("permission-option-allow").click();
  await expect(page.getByTestId("permission-prompt")).toContainText("This request was cancelled");
  await expect(page.getByTestId("permission-option-allow")).toHaveCount(0);
});

test.describe("a refetch that fails", () => {
  test.use({ allowedConsole: [/Failed to load resource/] });

  test("N6: a permission request stays shown and answerable when its refetch fails", async ({ page, request }) => {
    const api = new Api(request);
    const task = await api.createTask(`Permission blip ${Date.now()}`, { prompt: "/e2e:permission" });
    const gate = await gateSocket(page);
    await page.goto(`/t/${task.id}?session=${task.primary_session_id}`);
    await ready(page);
    const prompt = page.getByTestId("permission-prompt");
    await expect(prompt).toContainText("Run the test suite");
    // The socket drops; on reconnect every view refetches (P10), and this refetch fails.
    const letThrough = await failRefetchOnReconnect(page, gate, "pending_permission");
    await expect(prompt).toContainText("Run the test suite");

    await letThrough();
    await page.getByTestId("permission-option-allow").click();
    await expect(prompt).toHaveCount(0);
    await expect(page.getByTestId("chat-message").filter({ hasText: "Permission outcome: selected allow" })).toBeVisible();
  });
});
