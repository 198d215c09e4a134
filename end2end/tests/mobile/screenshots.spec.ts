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
    await server.stop();
  }
});
