import { expect, test } from "../../helpers/fixtures";
import { OwnServer } from "../../helpers/server";
import { lanPort, lanToken } from "../../playwright.config";

// Every server has an access token (this one also serves the LAN): pages redirect to the login
// page; logging in sets an HttpOnly cookie and the whole UI works with it (server functions,
// the live socket). These tests start logged out.
const lan = `http://127.0.0.1:${lanPort}`;
// The wrong token is answered 401, which Chromium logs as a failed resource.
test.use({ allowedConsole: [/status of 401/], storageState: { cookies: [], origins: [] } });

test("the login page lets a browser in and the UI works behind the token", async ({ page, context }) => {
  await page.goto(`${lan}/`);
  await expect(page).toHaveURL(`${lan}/login?next=%2F`);
  await page.getByTestId("login-token").fill("not-the-token");
  await page.getByTestId("login-submit").click();
  await expect(page.getByRole("alert")).toContainText("not this server's access token");

  await page.getByTestId("login-token").fill(lanToken);
  await page.getByTestId("login-submit").click();
  await expect(page).toHaveURL(`${lan}/`);
  const cookie = (await context.cookies(lan)).find((c) => c.name === "turnstile_auth");
  expect(cookie?.httpOnly).toBe(true);
  expect(cookie?.sameSite).toBe("Strict");
  expect(cookie?.value).not.toBe(lanToken);

  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  await expect(page.locator("body")).toHaveAttribute("data-ws", "open");
  // A server function through the UI: create a task from the sidebar form.
  const title = `LAN task ${Date.now()}`;
  await page.getByLabel("Task title").fill(title);
  await page.getByTestId("new-task-submit").click();
  await expect(page.getByTestId("sidebar-task-item").filter({ hasText: title })).toBeVisible();
});

test("without the token the API refuses and pages go to the login page", async ({ request }) => {
  const api = await request.get(`${lan}/api/v1/tasks`);
  expect(api.status()).toBe(401);
  const withBearer = await request.get(`${lan}/api/v1/tasks`, {
    headers: { Authorization: `Bearer ${lanToken}` },
  });
  expect(withBearer.status()).toBe(200);
});

test("the start-up login link logs a browser in once, and logout ends it", async ({ page, context }) => {
  const server = await OwnServer.start();
  try {
    const link = server.loginLink();
    expect(link).toMatch(new RegExp(`^${server.url}/login\\?token=`));
    await page.goto(link);
    // Logged in, and the one-time code is gone from the address bar.
    await expect(page).toHaveURL(`${server.url}/`);
    await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
    await expect(page.locator("body")).toHaveAttribute("data-ws", "open");

    // The link works once: a second browser gets the login page.
    const other = await context.browser()!.newContext();
    const second = await other.newPage();
    await second.goto(link);
    await expect(second.getByRole("alert")).toContainText("used already or has expired");
    await other.close();

    // Logging out ends this browser's login.
    await page.goto(`${server.url}/settings`);
    await page.getByTestId("logout").click();
    await expect(page).toHaveURL(`${server.url}/login`);
    await page.goto(`${server.url}/`);
    await expect(page).toHaveURL(/\/login\?next=/);
  } finally {
    await server.stop();
  }
});
