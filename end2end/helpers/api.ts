import { APIRequestContext, expect } from "@playwright/test";

/** A thin client for the REST API (spec/api.md) used to arrange state for UI tests. */
export class Api {
  constructor(private readonly request: APIRequestContext) {}

  async createTask(title: string, extra: Record<string, unknown> = {}) {
    const response = await this.request.post("/api/v1/tasks", { data: { title, ...extra } });
    expect(response.status(), await response.text()).toBe(200);
    return (await response.json()) as { id: string; title: string };
  }
}
