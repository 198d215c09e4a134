import { expect, test } from "../../helpers/fixtures";
import { Api, ready } from "../../helpers/api";

// B7 (docs/decisions/0013-browser-bundle-size.md): the shell is one wasm module; each page's
// code is its own chunk, fetched the first time that page is shown. Every file of a build
// revalidates on each load (Cache-Control: no-cache), so a browser never mixes two builds.
test("B7: each page's code is its own chunk, fetched when the page is first shown", async ({ page, request }) => {
  const task = await new Api(request).createTask(`Chunk task ${Date.now()}`, { prompt: "/e2e:simple-message" });
  const wasm: string[] = [];
  const caching: (string | undefined)[] = [];
  page.on("response", (r) => {
    const name = new URL(r.url()).pathname.split("/").pop() ?? "";
    if (name.endsWith(".wasm")) {
      wasm.push(name);
      caching.push(r.headers()["cache-control"]);
    }
  });

  await page.goto("/");
  await ready(page);
  await expect(page.getByTestId("board-column").first()).toBeVisible();
  expect(wasm).toContain("turnstile_bg.wasm");
  expect(wasm.some((n) => n.startsWith("split___board_page_view"))).toBe(true);
  expect(wasm.some((n) => n.startsWith("split___task_route_view"))).toBe(false);
  expect(wasm.some((n) => n.startsWith("split___settings_page_view"))).toBe(false);

  // Navigating in the page fetches the task page's chunk, then the page works.
  await page.locator(`[data-testid="sidebar-task-item"][data-task-id="${task.id}"]`).click();
  await expect(page).toHaveURL(new RegExp(`/t/${task.id}(\\?|$)`));
  await expect(page.getByTestId("chat-panel")).toBeVisible();
  await expect(page.getByTestId("prompt-input")).toBeVisible();
  expect(wasm.some((n) => n.startsWith("split___task_route_view"))).toBe(true);
  expect(wasm.some((n) => n.startsWith("split___settings_page_view"))).toBe(false);
  // Parts shown on demand come when they are shown: no question, no overlay code.
  expect(wasm.some((n) => n.startsWith("split_overlay_chunk"))).toBe(false);
  expect(wasm.some((n) => n.startsWith("split_new_session_chunk"))).toBe(false);
  await page.getByTestId("session-new").click();
  await expect(page.getByTestId("session-new-start")).toBeVisible();
  expect(wasm.some((n) => n.startsWith("split_new_session_chunk"))).toBe(true);
  expect(caching.length).toBeGreaterThan(1);
  for (const c of caching) expect(c).toBe("no-cache");
});

// P10 with lazy routes: the socket connects only once the page hydrated, its chunk included.
// Were it to connect while the chunk is still on its way, the page would be built after the
// refetch on connect and keep its server-rendered snapshot (seen once: a board card without its
// pending icon). The chunk is held until a socket opens or 2 s pass, so a socket that opens too
// early always does so first.
test("P10: the live channel connects only after the page's chunk arrived and hydrated", async ({ page }) => {
  const order: string[] = [];
  page.on("websocket", () => order.push("socket"));
  await page.route(/split___board_page_view[^/]*\.wasm$/, async (route) => {
    await Promise.race([
      page.waitForEvent("websocket").then(() => undefined),
      new Promise((resolve) => setTimeout(resolve, 2000)),
    ]);
    order.push("chunk");
    await route.continue();
  });
  await page.goto("/");
  await ready(page);
  expect(order.slice(0, 2)).toEqual(["chunk", "socket"]);
});
