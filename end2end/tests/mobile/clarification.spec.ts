import { expect, test } from "../../helpers/fixtures";
import { Api } from "../../helpers/api";

test("on a phone the question can be answered with a tap", async ({ page, request }) => {
  const task = await new Api(request).createTask("Phone question", { prompt: "/e2e:clarification" });
  await page.goto(`/t/${task.id}`);
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  const overlay = page.getByTestId("clarification-overlay");
  await expect(overlay).toBeVisible();
  await page.getByTestId("clarification-option-postgresql").tap();
  await expect(overlay).toHaveCount(0);
  await expect(page.getByTestId("chat-message").filter({ hasText: "postgresql" }).last()).toBeVisible();
});
