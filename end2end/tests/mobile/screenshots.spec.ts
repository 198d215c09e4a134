import { expect, test } from "../../helpers/fixtures";
import { screenshotPath, settle, workspaceForScreenshots } from "../../helpers/screenshots";

test("README screenshot: the phone board with the task drawer open", async ({ page }) => {
  const { server } = await workspaceForScreenshots();
  try {
    await page.goto(server.url);
    await settle(page);
    await page.getByTestId("mobile-session-menu").tap();
    await expect(page.getByRole("dialog", { name: "Tasks" })).toBeVisible();
    await page.screenshot({ path: screenshotPath("phone.png") });
  } finally {
    // Leave the page first: a page left open on a stopped server logs a refused
    // reconnect, which the browser-error check would count.
    await page.goto("about:blank");
    await server.stop();
  }
});
