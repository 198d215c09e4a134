import { expect, test } from "../../helpers/fixtures";
import { Api, failRefetchOnReconnect, gateSocket, ready, serverCalls } from "../../helpers/api";

// N4/N5 in the overlay: one question at a time, keyboard use, collapse and reopen, and what
// the user sees when someone else answered first or the question is gone.

async function openQuestion(page: import("@playwright/test").Page, api: Api, title: string, prompt: string) {
  const task = await api.createTask(`${title} ${Date.now()}`, { prompt });
  await page.goto(`/t/${task.id}?session=${task.primary_session_id}`);
  await ready(page);
  await expect(page.getByTestId("clarification-overlay")).toBeVisible();
  return task;
}

const answered = (page: import("@playwright/test").Page) =>
  page.getByTestId("chat-message").filter({ hasText: "You answered:" });

test("N5: the stepper goes forward and back, keeps choices, and submits on the last", async ({ page, request }) => {
  await openQuestion(page, new Api(request), "Stepper", "/e2e:clarification-multi");
  const overlay = page.getByTestId("clarification-overlay");
  await expect(overlay).toContainText("Question 1 of 3");
  await expect(overlay).toContainText("We are setting up a new service.");
  // Label and description on separate rows.
  const option = page.getByTestId("clarification-option-postgresql");
  const label = option.locator(".option-label");
  const description = option.locator(".option-description");
  await expect(description).toHaveText("Relational, strong consistency, rich SQL");
  const [l, d] = [await label.boundingBox(), await description.boundingBox()];
  expect(d!.y).toBeGreaterThanOrEqual(l!.y + l!.height - 1);
  await expect(page.getByTestId("clarification-submit")).toHaveCount(0);
  await expect(page.getByTestId("clarification-back")).toBeDisabled();

  await option.click();
  await expect(option).toHaveAttribute("aria-pressed", "true");
  await page.getByTestId("clarification-next").click();
  await expect(overlay).toContainText("Question 2 of 3");
  await page.getByTestId("clarification-back").click();
  await expect(overlay).toContainText("Question 1 of 3");
  await expect(page.getByTestId("clarification-option-postgresql")).toHaveAttribute("aria-pressed", "true");
  await page.getByTestId("clarification-next").click();
  // Number keys pick options of the question shown.
  await page.keyboard.press("2");
  await expect(page.getByTestId("clarification-option-go")).toHaveAttribute("aria-pressed", "true");
  await page.getByTestId("clarification-next").click();
  await expect(overlay).toContainText("Question 3 of 3");
  await expect(page.getByTestId("clarification-next")).toHaveCount(0);
  const submit = page.getByTestId("clarification-submit");
  await expect(submit).toBeDisabled();
  await page.getByTestId("clarification-custom-input").fill("On my laptop");
  await expect(submit).toBeEnabled();
  await submit.click();

  await expect(overlay).toHaveCount(0);
  const reply = answered(page);
  await expect(reply).toContainText('"db":{"selected_option":"postgresql"}');
  await expect(reply).toContainText('"language":{"selected_option":"go"}');
  await expect(reply).toContainText("On my laptop");
});

test("N5: Shift+Enter breaks the line, Enter sends, the counter counts", async ({ page, request }) => {
  await openQuestion(page, new Api(request), "Keys", "/e2e:clarification");
  const input = page.getByTestId("clarification-custom-input");
  await input.click();
  await page.keyboard.type("line one");
  await page.keyboard.press("Shift+Enter");
  await page.keyboard.type("line two");
  await expect(input).toHaveValue("line one\nline two");
  await expect(page.getByTestId("clarification-overlay")).toContainText("17 / 2000");
  await expect(input).toHaveAttribute("maxlength", "2000");
  // Digits typed in the text field are text, not option picks.
  await page.keyboard.type(" 3");
  await expect(page.getByTestId("clarification-option-sqlite")).toHaveAttribute("aria-pressed", "false");
  await page.keyboard.press("Enter");
  await expect(page.getByTestId("clarification-overlay")).toHaveCount(0);
  await expect(answered(page)).toContainText("line one\\nline two 3");
});

test("N5: Escape collapses from anywhere on the page, reopen brings the draft back, nothing is sent", async ({ page, request }) => {
  const api = new Api(request);
  const task = await openQuestion(page, api, "Escape", "/e2e:clarification");
  await page.getByTestId("clarification-custom-input").fill("half-written");
  // Focus elsewhere: the composer.
  await page.getByTestId("prompt-input").click();
  await page.keyboard.press("Escape");
  await expect(page.getByTestId("clarification-overlay")).toHaveCount(0);
  await page.getByTestId("clarification-reopen").click();
  await expect(page.getByTestId("clarification-custom-input")).toHaveValue("half-written");
  // Escape with focus on the page body.
  await page.locator("h1").click();
  await page.keyboard.press("Escape");
  await expect(page.getByTestId("clarification-overlay")).toHaveCount(0);
  // Collapsing is not skipping: the question is still pending, the icon still shows.
  const row = page.locator(`.sidebar [data-task-id="${task.id}"]`);
  await expect(row.getByTestId("task-state-waiting-for-input")).toBeVisible();
  expect((await api.task(task.id)).task_pending_action).toBe("clarification");
  await page.getByTestId("clarification-reopen").click();
  await page.keyboard.press("1");
  await expect(page.getByTestId("clarification-overlay")).toHaveCount(0);
  await expect(answered(page)).toContainText("postgresql");
  await expect(row.getByTestId("task-state-waiting-for-input")).toHaveCount(0);
});

test("L6: two tabs answer at once — both close, the second shows the winner's answer, one answer is recorded", async ({ browser, request }) => {
  const api = new Api(request);
  const context = await browser.newContext();
  const [first, second] = [await context.newPage(), await context.newPage()];
  const task = await api.createTask(`Two tabs ${Date.now()}`, { prompt: "/e2e:clarification" });
  const session = task.primary_session_id!;
  const gate = await gateSocket(second);
  const loads = serverCalls(second, "active_question");
  for (const p of [first, second]) {
    await p.goto(`/t/${task.id}?session=${session}`);
    await ready(p);
    await expect(p.getByTestId("clarification-overlay")).toBeVisible();
  }
  // The second tab's refetch after its socket opened has landed (`serverCalls`), and it hears
  // nothing from here on: it still shows the question when it answers.
  await loads.settled(2);
  gate.held = true;
  await first.getByTestId("clarification-option-postgresql").click();
  await expect(first.getByTestId("clarification-overlay")).toHaveCount(0);
  await api.waitTurnsDone(session, 1);

  await second.getByTestId("clarification-option-sqlite").click();
  await expect(second.getByTestId("clarification-overlay")).toHaveCount(0);
  await expect(second.getByRole("status").filter({ hasText: "Someone else answered first" })).toContainText("postgresql");

  const messages = await api.messages(session);
  const replies = messages.filter((m) => m.content.startsWith("You answered:"));
  // The whole transcript on failure (it once showed the agent's reply split by its question:
  // tests/it/agents.rs a_reply_whose_last_chunk_arrives_after_its_question_stays_one_message).
  expect(replies, JSON.stringify(messages, null, 1)).toHaveLength(1);
  expect(replies[0].content).toContain("postgresql");
  expect(messages.some((m) => m.content.includes("sqlite") && m.author === "user")).toBe(false);
  await context.close();
});

test("L16/N5: answering a question the agent has moved past says it is gone and writes nothing", async ({ page, request }) => {
  const api = new Api(request);
  const gate = await gateSocket(page);
  const q = { questions: [{ id: "old", prompt: "A question about to be superseded?", options: [{ id: "yes", label: "Yes" }, { id: "no", label: "No" }] }] };
  // The agent gives up after 1 s: long enough for the question to be written first with the
  // browser and the server sharing two cores (200 ms once was not: nothing was asked).
  const task = await openQuestion(page, api, "Gone", `e2e:ask-timeout(1000, ${JSON.stringify(q)})`);
  const session = task.primary_session_id!;
  await api.waitTurnsDone(session, 1);
  // The tab has heard of the detach (its refetch landed) before the gate closes: a refetch
  // still in flight when turn 2 starts would rightly find no question and hide the overlay.
  await expect(page.getByTestId("clarification-deferred-notice")).toBeVisible();
  gate.held = true;
  // A newer turn supersedes the detached question (L16); this tab has not heard of it.
  await api.prompt(session, "/e2e:simple-message");
  await api.waitTurnsDone(session, 2);
  const before = (await api.messages(session)).length;

  await page.getByTestId("clarification-option-yes").click();
  await expect(page.getByRole("status").filter({ hasText: "This question is gone" })).toBeVisible();
  await expect(page.getByTestId("clarification-overlay")).toHaveCount(0);
  expect((await api.messages(session)).length).toBe(before);
});

test.describe("a refetch that fails", () => {
  test.use({ allowedConsole: [/Failed to load resource/] });

  test("N4: a question stays shown and answerable when its refetch fails", async ({ page, request }) => {
    const api = new Api(request);
    const gate = await gateSocket(page);
    await openQuestion(page, api, "Blip", "/e2e:clarification");
    // The socket drops; on reconnect every view refetches (P10), and this refetch fails.
    const letThrough = await failRefetchOnReconnect(page, gate, "active_question");
    await expect(page.getByTestId("clarification-overlay")).toBeVisible();

    await letThrough();
    await page.getByTestId("clarification-option-postgresql").click();
    await expect(page.getByTestId("clarification-overlay")).toHaveCount(0);
    await expect(answered(page)).toContainText('"db":{"selected_option":"postgresql"}');
  });
});
