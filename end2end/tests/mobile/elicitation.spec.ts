import { expect, test } from "../../helpers/fixtures";
import { Api, ready } from "../../helpers/api";

test("E8: on a phone a Claude-shaped question is answered by taps, checkboxes included", async ({ page, request }) => {
  const form = {
    message: "Before I start",
    requestedSchema: {
      type: "object",
      properties: {
        question_0: {
          type: "string",
          description: "Which database should we use?",
          oneOf: [{ const: "PostgreSQL", title: "PostgreSQL" }, { const: "SQLite", title: "SQLite" }],
        },
        question_0_custom: { type: "string" },
        question_1: { type: "array", description: "Which features first?", items: { anyOf: [{ const: "auth", title: "Auth" }, { const: "search", title: "Search" }] } },
      },
      required: ["question_0", "question_1"],
    },
  };
  const task = await new Api(request).createTask("Phone elicitation", { prompt: `e2e:elicit(${JSON.stringify(form)})` });
  await page.goto(`/t/${task.id}`);
  await ready(page);
  const overlay = page.getByTestId("clarification-overlay");
  await page.getByTestId("clarification-option-PostgreSQL").tap();
  await page.getByTestId("clarification-next").tap();
  await page.getByTestId("clarification-option-search").tap();
  await page.getByTestId("clarification-submit").tap();
  await expect(overlay).toHaveCount(0);
  await expect(
    page.getByTestId("chat-message").filter({ hasText: 'Elicitation result: accept {"question_0":"PostgreSQL","question_1":["search"]}' }),
  ).toBeVisible();
});
