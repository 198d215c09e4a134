import { expect, test } from "../../helpers/fixtures";
import { Api, ready } from "../../helpers/api";

// A stand-in for the browser's Notification API that records what was shown.
const STUB = `
  window.__shown = [];
  class StubNotification {
    static permission = "granted";
    static requestPermission() { return Promise.resolve("granted"); }
    constructor(title, options) { window.__shown.push({ title, body: options && options.body }); }
  }
  window.Notification = StubNotification;
`;

test("a question elsewhere counts in the title and notifies once; reload and replay never notify", async ({ page, request }) => {
  const api = new Api(request);
  await page.addInitScript(STUB);
  const here = await api.createTask(`Looking here ${Date.now()}`, { prompt: "/e2e:simple-message" });
  await page.goto(`/t/${here.id}`);
  await ready(page);
  await page.getByTestId("notifications-enable").click();
  await expect(page).toHaveTitle("Turnstile");

  const elsewhere = await api.createTask(`Needs me ${Date.now()}`, { prompt: "/e2e:clarification" });
  await expect(page).toHaveTitle("(1) Turnstile");
  await expect.poll(() => page.evaluate(() => (window as unknown as { __shown: unknown[] }).__shown.length)).toBe(1);
  const shown = await page.evaluate(() => (window as unknown as { __shown: { title: string; body: string }[] }).__shown);
  expect(shown[0].body).toBe("The agent asks you a question.");

  // A question in the task on screen needs no alert.
  const own = await api.addSession(here.id, "/e2e:clarification");
  await expect(page.locator(`[data-testid="session-tab"][data-session-id="${own.id}"]`)).toHaveAttribute("data-pending", "clarification");
  await expect(page).toHaveTitle("(1) Turnstile");

  // Reload: questions that were already there are not news.
  await page.reload();
  await ready(page);
  await expect(page).toHaveTitle("Turnstile");
  expect(await page.evaluate(() => (window as unknown as { __shown: unknown[] }).__shown.length)).toBe(0);

  // A new one counts again; opening its task reads it.
  const another = await api.createTask(`Needs me too ${Date.now()}`, { prompt: "/e2e:permission" });
  await expect(page).toHaveTitle("(1) Turnstile");
  await page.locator(`.sidebar [data-task-id="${another.id}"]`).click();
  await expect(page).toHaveTitle("Turnstile");
  void elsewhere;
});
