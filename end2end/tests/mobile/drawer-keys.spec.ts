import { expect, test } from "../../helpers/fixtures";
import { Api, ready } from "../../helpers/api";

test("the phone drawer scrolls inside, closes on Escape and gives focus back to the menu button", async ({ page, request }) => {
  await new Api(request).createTask(`Drawer keys ${Date.now()}`);
  await page.goto("/");
  await ready(page);
  const menu = page.getByTestId("mobile-session-menu");
  await menu.tap();
  const drawer = page.getByRole("dialog", { name: "Tasks" });
  await expect(drawer).toBeVisible();
  await expect(menu).toHaveAttribute("aria-expanded", "true");
  const style = await drawer.evaluate((el) => {
    const s = getComputedStyle(el);
    return { overflowY: s.overflowY, maxHeight: s.maxHeight, position: s.position };
  });
  expect(style.overflowY).toBe("auto");
  expect(style.position).toBe("fixed");
  expect(style.maxHeight).not.toBe("none");
  await page.getByTestId("sidebar-search").focus();
  await page.keyboard.press("Escape");
  await expect(page.getByRole("dialog", { name: "Tasks" })).toHaveCount(0);
  await expect(menu).toBeFocused();
  await expect(menu).toHaveAttribute("aria-expanded", "false");
});
