import { expect, test } from "../../helpers/fixtures";
import { Api, ready } from "../../helpers/api";

// Agent text is Markdown, rendered and sanitized by the server (pulldown-cmark + ammonia).
// Hostile text in agent replies, task titles, prompts and answers never executes: the fixture
// fails the test on any dialog, and the DOM holds no script, handler or javascript: link.

const say = (text: string) => `e2e:message(${JSON.stringify(text)})`;

test("agent replies render as Markdown: headings, lists, emphasis, code, safe links", async ({ page, request }) => {
  const api = new Api(request);
  const md = "## Plan\n\n1. **one**\n2. _two_\n\n- a bullet\n\n```rust\nfn main() {}\n```\n\nSee [the docs](https://example.com/docs) and `inline code`.";
  const task = await api.createTask(`Markdown ${Date.now()}`, { prompt: say(md) });
  await api.waitTurnsDone(task.primary_session_id!, 1);
  await page.goto(`/t/${task.id}?session=${task.primary_session_id}`);
  await ready(page);
  const body = page.getByTestId("agent-markdown").last();
  await expect(body.locator("h2")).toHaveText("Plan");
  await expect(body.locator("ol > li")).toHaveCount(2);
  await expect(body.locator("ol strong")).toHaveText("one");
  await expect(body.locator("ol em")).toHaveText("two");
  await expect(body.locator("ul > li")).toHaveText("a bullet");
  await expect(body.locator("pre code")).toContainText("fn main() {}");
  await expect(body.locator("p code")).toHaveText("inline code");
  const link = body.locator("a", { hasText: "the docs" });
  await expect(link).toHaveAttribute("href", "https://example.com/docs");
  await expect(link).toHaveAttribute("rel", "noopener noreferrer");
  // Nothing is shown as typed.
  await expect(body).not.toContainText("##");
  await expect(body).not.toContainText("**");
});

const CORPUS = [
  "<script>alert('agent-script')</script>",
  "<img src=x onerror=\"alert('agent-img')\">",
  "<svg onload=\"alert('agent-svg')\"></svg>",
  "<iframe src=\"javascript:alert('agent-iframe')\"></iframe>",
  "[click me](javascript:alert('agent-link'))",
  "<a href=\"javascript:alert('agent-a')\">raw link</a>",
  "<details open ontoggle=\"alert('agent-toggle')\"><summary>x</summary></details>",
  "<style>body{display:none}</style>",
  "<form action=\"javascript:alert('agent-form')\"><button>go</button></form>",
];

test("XSS corpus in agent text, task titles, prompts and answers: nothing executes", async ({ page, request }) => {
  const api = new Api(request);
  const hostileTitle = `<img src=x onerror="alert('title')"> ${Date.now()}`;
  const script = [...CORPUS.map(say), `e2e:ask(${JSON.stringify({ questions: [{ id: "q", prompt: "<img src=x onerror=\"alert('question')\">?", options: [{ id: "a", label: "<b onmouseover=alert('label')>A</b>" }, { id: "b", label: "B" }] }] })})`].join("\n");
  const task = await api.createTask(hostileTitle, { prompt: script });
  await page.goto(`/t/${task.id}?session=${task.primary_session_id}`);
  await ready(page);
  const overlay = page.getByTestId("clarification-overlay");
  await expect(overlay).toBeVisible();
  // Shown as text, not markup.
  await expect(page.locator("h1")).toHaveText(hostileTitle);
  await expect(overlay).toContainText("<img src=x onerror=\"alert('question')\">?");
  await page.getByTestId("clarification-option-a").hover();
  await page.getByTestId("clarification-custom-input").fill("<script>alert('answer')</script><img src=x onerror=\"alert('answer-img')\">");
  await page.getByTestId("clarification-submit").click();
  await expect(overlay).toHaveCount(0);
  await expect(page.getByTestId("chat-message").filter({ hasText: "You answered:" })).toBeVisible();
  await page.getByTestId("prompt-input").fill("<img src=x onerror=\"alert('prompt')\">");
  await page.getByTestId("prompt-input").press("Enter");
  // The echo is Markdown too: the image survives without its handler.
  await expect(page.getByTestId("agent-markdown").last()).toHaveText("Echo:");
  await expect(page.getByTestId("prompt-input")).toHaveValue("");
  await expect(page.getByTestId("agent-markdown").filter({ hasText: "raw link" })).toBeVisible();

  const main = page.locator("main");
  expect(await main.locator("script, iframe, style, form:not(.composer), svg").count()).toBe(0);
  const handlers = await page.evaluate(() =>
    [...document.querySelectorAll("*")].flatMap((el) => [...el.attributes].filter((a) => a.name.startsWith("on")).map((a) => `${el.tagName}.${a.name}`)),
  );
  expect(handlers).toEqual([]);
  expect(await page.locator('[href^="javascript:" i], [src^="javascript:" i], [action^="javascript:" i]').count()).toBe(0);
  // Clicking what is left of the links does not run anything either.
  for (const a of await page.getByTestId("agent-markdown").locator("a").all()) await a.click({ noWaitAfter: true }).catch(() => {});
  await expect(page.locator("body")).toBeVisible();

  // The board and the sidebar show the hostile title as text too.
  await page.goto("/");
  await ready(page);
  await expect(page.locator(`.sidebar [data-task-id="${task.id}"] .task-title`)).toHaveText(hostileTitle);
  await expect(page.locator(`[data-testid="board-card"][data-task-id="${task.id}"] .card-title`)).toHaveText(hostileTitle);
});
