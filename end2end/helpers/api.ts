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
}

export const SHORT_TIMEOUT =
  'e2e:ask-timeout(300, {"questions": [{"id": "db", "prompt": "Which database?", "options": [{"id": "postgresql", "label": "PostgreSQL"}, {"id": "sqlite", "label": "SQLite"}]}]})';
