import { APIRequestContext, expect } from "@playwright/test";

export type Task = { id: string; title: string; primary_session_id: string | null; task_pending_action: string | null };

/** A thin client for the REST API (spec/api.md) used to arrange state for UI tests. */
export class Api {
  constructor(private readonly request: APIRequestContext) {}

  async createTask(title: string, extra: Record<string, unknown> = {}): Promise<Task> {
    const response = await this.request.post("/api/v1/tasks", { data: { title, ...extra } });
    expect(response.status(), await response.text()).toBe(200);
    return (await response.json()) as Task;
  }

  async addSession(taskId: string, prompt: string): Promise<{ id: string }> {
    const response = await this.request.post(`/api/v1/tasks/${taskId}/sessions`, { data: { prompt } });
    expect(response.status(), await response.text()).toBe(200);
    return response.json();
  }

  async turns(sessionId: string): Promise<{ completed_at: string | null }[]> {
    const response = await this.request.get(`/api/v1/sessions/${sessionId}/turns`);
    return (await response.json()).turns;
  }

  /** Waits until the session has `n` turns, all completed. */
  async waitTurnsDone(sessionId: string, n: number) {
    await expect
      .poll(async () => {
        const turns = await this.turns(sessionId);
        return turns.length === n && turns.every((t) => t.completed_at !== null);
      })
      .toBe(true);
  }

  async task(taskId: string): Promise<Task> {
    return (await this.request.get(`/api/v1/tasks/${taskId}`)).json();
  }

  /** Sends a user prompt to a session (a new turn). */
  async prompt(sessionId: string, content: string) {
    const response = await this.request.post(`/api/v1/sessions/${sessionId}/prompt`, { data: { content } });
    expect(response.status(), await response.text()).toBe(200);
  }

  async patchTask(taskId: string, data: Record<string, unknown>): Promise<Task> {
    const response = await this.request.patch(`/api/v1/tasks/${taskId}`, { data });
    expect(response.status(), await response.text()).toBe(200);
    return response.json();
  }

  async messages(sessionId: string): Promise<{ id: string; kind: string; author: string; content: string; pending_id?: string }[]> {
    return (await (await this.request.get(`/api/v1/sessions/${sessionId}/messages?limit=500`)).json()).messages;
  }

  async bundle(pendingId: string): Promise<{ status: string; response: unknown }> {
    return (await this.request.get(`/api/v1/clarifications/${pendingId}`)).json();
  }

  async createWorkflow(name: string, steps: string[]): Promise<{ id: string; steps: { id: string; name: string }[] }> {
    const response = await this.request.post("/api/v1/workflows", { data: { name, steps: steps.map((name) => ({ name })) } });
    expect(response.status(), await response.text()).toBe(200);
    return response.json();
  }
}

/** A question for scripted prompts (`e2e:ask`, `e2e:ask-timeout`). */
export function question(id: string, prompt: string, options: string[] = ["yes", "no"]) {
  return { questions: [{ id, prompt, options: options.map((o) => ({ id: o, label: o.toUpperCase() })) }] };
}

/** Waits until the page is interactive and its live channel is open. */
export async function ready(page: import("@playwright/test").Page) {
  await expect(page.locator("body")).toHaveAttribute("data-hydrated", "true");
  await expect(page.locator("body")).toHaveAttribute("data-ws", "open");
}

/**
 * Watches the page's calls to the server function `name` (`/api/fn/<name>`) from now on (call
 * it before `goto`). `settled(n)` waits until at least `n` have finished and none is in flight.
 * A page refetches every view when its socket opens (P10), after its first load: a test that
 * holds the socket (`gateSocket`) and then changes something on the server waits for that
 * second call first, or the refetch still in flight may rightly bring the change into view.
 */
export function serverCalls(page: import("@playwright/test").Page, name: string) {
  let inFlight = 0;
  let finished = 0;
  const ours = (r: import("@playwright/test").Request) => new URL(r.url()).pathname === `/api/fn/${name}`;
  const done = (r: import("@playwright/test").Request) => {
    if (ours(r)) {
      inFlight -= 1;
      finished += 1;
    }
  };
  page.on("request", (r) => {
    if (ours(r)) inFlight += 1;
  });
  page.on("requestfinished", done);
  page.on("requestfailed", done);
  return {
    settled: (n: number) =>
      expect
        .poll(() => finished >= n && inFlight === 0, { message: `${n} calls of ${name} finished, none in flight` })
        .toBe(true),
  };
}

export const SHORT_TIMEOUT =
  'e2e:ask-timeout(300, {"questions": [{"id": "db", "prompt": "Which database?", "options": [{"id": "postgresql", "label": "PostgreSQL"}, {"id": "sqlite", "label": "SQLite"}]}]})';

/**
 * Routes the page's live socket through the test: while `held` is set, nothing the server
 * pushes reaches the page (a tab that has not heard the news yet); `refuse` closes every new
 * connection at once (a server that cannot be reached); `drop()` closes the current one as a
 * network blip would (the page reconnects), waiting for the page's first connection if there is
 * none yet.
 */
export async function gateSocket(page: import("@playwright/test").Page) {
  let current: import("@playwright/test").WebSocketRoute | undefined;
  let connected!: () => void;
  const first = new Promise<void>((resolve) => (connected = resolve));
  const gate = {
    held: false,
    refuse: false,
    drop: async () => {
      await first;
      await current!.close({ code: 1011, reason: "dropped by the test" });
    },
  };
  await page.routeWebSocket(/\/ws$/, (ws) => {
    if (gate.refuse) {
      ws.close({ code: 1011, reason: "refused by the test" });
      return;
    }
    current = ws;
    connected();
    const server = ws.connectToServer();
    server.onMessage((m) => {
      if (!gate.held) ws.send(m);
    });
    ws.onMessage((m) => server.send(m));
    server.onClose((code, reason) => ws.close({ code, reason }));
    ws.onClose((code, reason) => server.close({ code, reason }));
  });
  return gate;
}

/**
 * Drops the page's live socket (through `gate`, which must be connected) so that it reconnects
 * and refetches every view (P10), and makes that refetch of the server function `endpoint` fail.
 * Returns once the failure has reached the page and it is live again; the returned function
 * lets the endpoint through again.
 */
export async function failRefetchOnReconnect(
  page: import("@playwright/test").Page,
  gate: Awaited<ReturnType<typeof gateSocket>>,
  endpoint: string,
) {
  const status = page.getByTestId("connection-status");
  await expect(status).toHaveText("Live");
  const url = `**/api/fn/${endpoint}`;
  await page.route(url, (route) => route.abort());
  const failed = page.waitForEvent("requestfailed", (r) => r.url().includes(`/api/fn/${endpoint}`));
  await gate.drop();
  await failed;
  await expect(status).toHaveText("Live");
  // One turn of the page's event loop after the failure reached it: the failure has landed.
  await page.evaluate(() => new Promise((done) => setTimeout(() => requestAnimationFrame(done), 0)));
  return () => page.unroute(url);
}
