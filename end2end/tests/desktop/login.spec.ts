import { expect, test } from "../../helpers/fixtures";
import { lanPort, lanToken } from "../../playwright.config";

// A server with an access token (LAN use): pages redirect to the login page; logging in sets
// an HttpOnly cookie and the whole UI works with it (server functions, the live socket).
const lan = `http://127.0.0.1:${lanPort}`;
// The wrong token is answered 401, which Chromium logs as a failed resource.
test.use({ allowedConsole: [/status of 401/] });

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
