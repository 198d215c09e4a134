import { expect, test } from "../../helpers/fixtures";
import { Api, ready } from "../../helpers/api";

// E8: questions an agent asks through ACP elicitation (the mock's `e2e:elicit`) are answered in
// the same overlay as MCP questions, with the input each field asks for.

/** The shape Claude Code's ACP adapter sends for AskUserQuestion (E3). */
function claudeForm(multi: boolean) {
  const properties: Record<string, unknown> = {
    question_0: {
      type: "string",
      title: "Database",
      description: "Which database should we use?",
      oneOf: [
        { const: "PostgreSQL", title: "PostgreSQL", description: "Server" },
        { const: "SQLite", title: "SQLite", description: "Embedded" },
      ],
    },
    question_0_custom: { type: "string", description: "Other" },
  };
  if (multi) {
    properties.question_1 = {
      type: "array",
      title: "Features",
      description: "Which features first?",
      minItems: 2,
      items: { anyOf: [{ const: "auth", title: "Auth" }, { const: "search", title: "Search" }, { const: "export", title: "Export" }] },
    };
  }
  return { message: "Before I start", requestedSchema: { type: "object", properties, required: Object.keys(properties).filter((k) => !k.endsWith("_custom")) } };
}

async function openTask(page: import("@playwright/test").Page, api: Api, title: string, form: unknown) {
  const task = await api.createTask(title, { prompt: `e2e:elicit(${JSON.stringify(form)})` });
  await page.goto(`/t/${task.id}`);
  await ready(page);
  return task;
}

test("E8: a Claude-shaped question is answered with one click and the agent gets the picked value", async ({ page, request }) => {
  await openTask(page, new Api(request), "Elicited pick", claudeForm(false));
  const overlay = page.getByTestId("clarification-overlay");
  await expect(overlay).toContainText("Which database should we use?");
  await page.getByTestId("clarification-option-SQLite").click();
  await expect(overlay).toHaveCount(0);
  await expect(page.getByTestId("chat-message").filter({ hasText: 'Elicitation result: accept {"question_0":"SQLite"}' })).toBeVisible();
});

test("E8: Other text and a multi-select with its bounds", async ({ page, request }) => {
  await openTask(page, new Api(request), "Elicited form", claudeForm(true));
  const overlay = page.getByTestId("clarification-overlay");
  await expect(overlay).toContainText("Question 1 of 2");
  await page.getByTestId("clarification-custom-input").fill("MariaDB");
  await page.getByTestId("clarification-next").click();
  await expect(overlay).toContainText("Which features first?");
  // Checkboxes: one pick is below minItems, so the overlay says why and will not send.
  await page.getByTestId("clarification-option-auth").check();
  await expect(page.getByTestId("clarification-input-error")).toContainText("at least 2");
  await expect(page.getByTestId("clarification-submit")).toBeDisabled();
  await page.getByTestId("clarification-option-export").check();
  await page.getByTestId("clarification-option-search").check();
  await page.getByTestId("clarification-option-export").uncheck();
  await expect(page.getByTestId("clarification-input-error")).toHaveCount(0);
  await page.getByTestId("clarification-submit").click();
  await expect(overlay).toHaveCount(0);
  await expect(
    page.getByTestId("chat-message").filter({ hasText: 'Elicitation result: accept {"question_0_custom":"MariaDB","question_1":["auth","search"]}' }),
  ).toBeVisible();
});

test("E8: a number out of range is refused in the overlay and by the server", async ({ page, request }) => {
  const api = new Api(request);
  const form = {
    message: "How many workers?",
    requestedSchema: {
      type: "object",
      properties: {
        workers: { type: "integer", title: "Workers", description: "How many workers?", minimum: 1, maximum: 8 },
        note: { type: "string", title: "Note", description: "Anything else?", maxLength: 40 },
      },
      required: ["workers"],
    },
  };
  const task = await openTask(page, api, "Elicited number", form);
  const overlay = page.getByTestId("clarification-overlay");
  const input = page.getByTestId("clarification-input");
  await input.fill("9");
  await expect(page.getByTestId("clarification-input-error")).toContainText("at most 8");
  await page.getByTestId("clarification-next").click();
  await expect(overlay).toContainText("(optional)");
  await expect(page.getByTestId("clarification-submit")).toBeDisabled();

  // The server refuses the same value with 422 naming the question, and keeps the question.
  const session = task.primary_session_id!;
  const question = (await api.messages(session)).find((m) => m.kind === "clarification_request")!;
  const refused = await request.post(`/api/v1/clarifications/${question.pending_id}/respond`, {
    data: { answers: [{ question_id: "workers", selected_options: [], custom_text: "9" }] },
  });
  expect(refused.status()).toBe(422);
  expect(await refused.text()).toContain("workers");
  await expect(overlay).toBeVisible();

  await page.getByTestId("clarification-back").click();
  await input.fill("3");
  await expect(page.getByTestId("clarification-input-error")).toHaveCount(0);
  await page.getByTestId("clarification-next").click();
  // The optional note is left empty: it is not sent.
  await page.getByTestId("clarification-submit").click();
  await expect(overlay).toHaveCount(0);
  await expect(page.getByTestId("chat-message").filter({ hasText: 'Elicitation result: accept {"workers":3}' })).toBeVisible();
});

test("E7: a link is shown as text with its host and answered Done", async ({ page, request }) => {
  const api = new Api(request);
  const task = await api.createTask("Elicited link", { prompt: 'e2e:elicit-url("https://login.example.org/device?code=1")' });
  await page.goto(`/t/${task.id}`);
  await ready(page);
  const overlay = page.getByTestId("clarification-overlay");
  await expect(overlay.getByTestId("clarification-link-host")).toHaveText("login.example.org");
  await expect(overlay.getByTestId("clarification-link-text")).toHaveText("https://login.example.org/device?code=1");
  const link = overlay.getByTestId("clarification-link");
  await expect(link).toHaveAttribute("rel", "noopener noreferrer");
  await expect(link).toHaveAttribute("target", "_blank");
  await page.getByTestId("clarification-submit").click();
  await expect(overlay).toHaveCount(0);
  await expect(page.getByTestId("chat-message").filter({ hasText: "Elicitation result: accept" })).toBeVisible();
});
