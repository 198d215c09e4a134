import { expect, test } from "../../helpers/fixtures";
import { gateSocket } from "../../helpers/api";
import { OwnServer, authedFetch } from "../../helpers/server";

// While the server is away the page says so; when it is back the page reconnects by itself
// and shows what changed meanwhile (P10: refetch on connect), without a reload.
test.use({ allowedConsole: [/WebSocket|ERR_CONNECTION_REFUSED|Failed to load resource/] });

test("reconnect after a server restart shows fresh state", async ({ page }) => {
  test.setTimeout(90_000);
  const server = await OwnServer.start();
  const post = (path: string, data: unknown, method = "POST") =>
    authedFetch(`${server.url}/api/v1${path}`, { method, headers: { "content-type": "application/json" }, body: JSON.stringify(data) }).then((r) => r.json());
  try {
    const task = await post("/tasks", { title: "Before the restart" });
    const gate = await gateSocket(page);
    await page.goto(server.url);
    await expect(page.locator("body")).toHaveAttribute("data-ws", "open");
    const status = page.getByTestId("connection-status");
    await expect(status).toHaveText("Live");

    // The page cannot reach the server while it restarts and changes happen.
    gate.refuse = true;
    await server.down();
    await expect(status).toHaveText("Reconnecting…");
    await expect(page.locator("body")).toHaveAttribute("data-ws", "closed");
    await server.up();
    const created = await post("/tasks", { title: "Created while you were away" });
    await post(`/tasks/${task.id}`, { title: "Renamed while you were away" }, "PATCH");
    await expect(page.locator(`.sidebar [data-task-id="${created.id}"]`)).toHaveCount(0);

    gate.refuse = false;
    await expect(status).toHaveText("Live", { timeout: 20_000 });
    await expect(page.locator(`.sidebar [data-task-id="${created.id}"]`)).toHaveText("Created while you were away");
    await expect(page.locator(`.sidebar [data-task-id="${task.id}"]`)).toHaveText("Renamed while you were away");
  } finally {
    // Leave the page first: a page left open on a stopped server logs a refused
    // reconnect, which the browser-error check would count.
    await page.goto("about:blank");
    await server.stop();
  }
});
