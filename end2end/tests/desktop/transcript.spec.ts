import { expect, test } from "../../helpers/fixtures";
import { Api, ready } from "../../helpers/api";

// A long session shows its newest page (200 rows), newest last and scrolled into view; older
// rows come page by page with "Load earlier messages".
test("the transcript shows the newest messages first and pages upward", async ({ page, request }) => {
  test.setTimeout(120_000);
  const api = new Api(request);
  const task = await api.createTask(`Long session ${Date.now()}`, { prompt: "prompt 0" });
  const session = task.primary_session_id!;
  const turns = 110; // 220 rows: more than one page
  // The server queues at most 32 prompts per session (429 beyond): send in batches of 16 and
  // let each batch finish, so a slow machine never hits the bound.
  for (let n = 1; n < turns; n++) {
    await api.prompt(session, `prompt ${n}`);
    if (n % 16 === 0) await api.waitTurnsDone(session, n + 1);
  }
  await api.waitTurnsDone(session, turns);

  await page.goto(`/t/${task.id}?session=${session}`);
  await ready(page);
  const rows = page.getByTestId("chat-message");
  await expect(rows).toHaveCount(200);
  await expect(rows.last()).toContainText(`Echo: prompt ${turns - 1}`);
  await expect(rows.last()).toBeInViewport();
  await expect(page.getByText("Echo: prompt 0", { exact: true })).toHaveCount(0);

  await page.getByTestId("transcript-load-earlier").click();
  await expect(rows).toHaveCount(2 * turns);
  await expect(rows.first()).toHaveText("prompt 0");
  await expect(page.getByTestId("transcript-load-earlier")).toHaveCount(0);

  // A new reply arrives live and is scrolled to.
  await rows.last().scrollIntoViewIfNeeded();
  await api.prompt(session, "one more");
  await expect(rows.last()).toContainText("Echo: one more");
  await expect(rows.last()).toBeInViewport();
});
