import { Page } from "@playwright/test";
import * as path from "node:path";
import { OwnServer, authedFetch } from "./server";

/** The README's screenshots: a server of their own with a small, realistic workspace. */
export async function workspaceForScreenshots(): Promise<{ server: OwnServer; asking: { id: string; session: string } }> {
  const server = await OwnServer.start();
  const post = async (p: string, data: unknown) => {
    const r = await authedFetch(`${server.url}/api/v1${p}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(data) });
    return r.json();
  };
  const plan = [
    "## Plan",
    "",
    "1. **Schema**: one `events` table, indexed by `session_id`",
    "2. **API**: `GET /events?after=` with a cursor",
    "3. **UI**: a live list fed by the socket",
    "",
    "```rust",
    "pub async fn events_after(db: &Db, cursor: i64) -> Result<Vec<Event>> { … }",
    "```",
  ].join("\n");
  const waitIdle = async (taskId: string) => {
    for (let i = 0; i < 200; i++) {
      const t = await (await authedFetch(`${server.url}/api/v1/tasks/${taskId}`)).json();
      if (t.status_summary && t.status_summary.body?.primary_session?.state !== "running") return;
      await new Promise((r) => setTimeout(r, 25));
    }
  };
  for (const [title, prompt] of [
    ["Fix flaky login test", "/e2e:simple-message"],
    ["Upgrade to Rust 2024", `e2e:message(${JSON.stringify(plan)})`],
    ["Run the migration suite", "/e2e:permission"],
    ["Write release notes", "/e2e:simple-message"],
  ]) {
    const t = await post("/tasks", { title, prompt });
    await waitIdle(t.id);
  }
  const asking = await post("/tasks", { title: "Add an event log", prompt: "/e2e:clarification-multi" });
  await waitIdle(asking.id);
  return { server, asking: { id: asking.id, session: asking.primary_session_id } };
}

/** `docs/screenshots/` with UPDATE_SCREENSHOTS=1 (the README's pictures); otherwise the run's
 * own output, so a test run leaves the working tree clean. */
export function screenshotPath(name: string) {
  const dir = process.env.UPDATE_SCREENSHOTS ? "../../docs/screenshots" : "../test-results/screenshots";
  return path.resolve(__dirname, dir, name);
}

export async function settle(page: Page) {
  await page.locator("body[data-ws=open]").waitFor();
  await page.evaluate(() => document.fonts.ready);
}
