import { expect, test } from "../../helpers/fixtures";
import { screenshotPath, settle, workspaceForScreenshots } from "../../helpers/screenshots";

test.use({ viewport: { width: 1280, height: 800 } });

test("README screenshot: the desktop task page with an agent's question", async ({ page }) => {
  const { server, asking } = await workspaceForScreenshots();
  try {
    await page.goto(`${server.url}/t/${asking.id}?session=${asking.session}`);
    await settle(page);
    await expect(page.getByTestId("clarification-overlay")).toContainText("Question 1 of 3");
    await page.getByTestId("clarification-option-sqlite").click();
    await page.screenshot({ path: screenshotPath("desktop.png") });
  } finally {
    // Leave the page first: a page left open on a stopped server logs a refused
    // reconnect, which the browser-error check would count.
    await page.goto("about:blank");
    await server.stop();
  }
});
