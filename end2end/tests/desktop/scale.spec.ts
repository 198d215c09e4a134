import { expect, test } from "../../helpers/fixtures";
import { OwnServer, authedFetch } from "../../helpers/server";

// B2 (docs/performance.md): 10,000 tasks must not make the page heavier than the first
// page. The server renders one page of the sidebar and of the board; the rest comes by
// "load more".
const PAGE = 50;
const TOTAL = 10_000;

async function createTasks(url: string, from: number, to: number) {
  const parallel = 16;
  let next = from;
  const worker = async () => {
    while (next < to) {
      const n = next++;
      const r = await authedFetch(`${url}/api/v1/tasks`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ title: `Bulk task ${String(n).padStart(5, "0")}` }),
      });
      if (r.status !== 200) throw new Error(`create ${n}: ${r.status} ${await r.text()}`);
    }
  };
  await Promise.all(Array.from({ length: parallel }, worker));
}

async function pageBytes(url: string): Promise<{ bytes: number; rows: number }> {
  const html = await (await authedFetch(`${url}/`)).text();
  return { bytes: html.length, rows: html.split('data-testid="sidebar-task-item"').length - 1 };
}

test("10,000 tasks: the page stays the size of the first page; load more brings the next", async ({ page }) => {
  test.setTimeout(240_000);
  const server = await OwnServer.start();
  try {
    await createTasks(server.url, 0, PAGE);
    const onePage = await pageBytes(server.url);
    expect(onePage.rows).toBe(PAGE);

    await createTasks(server.url, PAGE, TOTAL);
    const many = await pageBytes(server.url);
    expect(many.rows).toBe(PAGE);
    // Same rows, a "load more" button and a few digits more: within 10 %.
    expect(many.bytes).toBeLessThan(onePage.bytes * 1.1);

    await page.goto(server.url);
    await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
    const rows = page.locator(".sidebar [data-testid=sidebar-task-item]");
    await expect(rows).toHaveCount(PAGE);
    await expect(page.getByTestId("board-card")).toHaveCount(PAGE);
    await page.getByTestId("sidebar-load-more").click();
    await expect(rows).toHaveCount(2 * PAGE);
    const ids = await rows.evaluateAll((els) => els.map((e) => e.getAttribute("data-task-id")));
    expect(new Set(ids).size).toBe(2 * PAGE);
    // The title filter asks the server: a task far down the list is found, whatever the case
    // of what was typed (the browser folds case with the engine's own toLowerCase).
    await page.getByTestId("sidebar-search").fill("TASK 00007");
    await expect(rows).toHaveCount(1);
    await expect(rows.first()).toContainText("Bulk task 00007");
  } finally {
    // Leave the page first: a page left open on a stopped server logs a refused
    // reconnect, which the browser-error check would count.
    await page.goto("about:blank");
    await server.stop();
  }
});
