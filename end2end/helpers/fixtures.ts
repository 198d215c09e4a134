import { test as base, expect } from "@playwright/test";

/**
 * Every UI test fails on a browser-side error: a console error (Leptos panics and hydration
 * mismatches land there), an uncaught exception, a warning about hydration or disposed
 * values, or any dialog (the XSS corpus relies on this: an injected `alert()` fails the test).
 * A test that expects some console noise (a server restart) lists it in `allowedConsole`.
 */
export const test = base.extend<{ allowedConsole: RegExp[]; browserErrors: string[] }>({
  allowedConsole: [[], { option: true }],
  browserErrors: [
    async ({ page, allowedConsole }, use) => {
      const errors: string[] = [];
      const allowed = (text: string) => allowedConsole.some((r) => r.test(text));
      page.on("console", (m) => {
        const text = m.text();
        const bad = m.type() === "error" || (m.type() === "warning" && /hydrat|disposed|panicked/i.test(text));
        if (bad && !allowed(text)) errors.push(`console.${m.type()}: ${text.slice(0, 500)}`);
      });
      page.on("pageerror", (e) => errors.push(`pageerror: ${e.message}`));
      page.on("dialog", async (d) => {
        errors.push(`dialog (${d.type()}): ${d.message()}`);
        await d.dismiss();
      });
      await use(errors);
      expect(errors, "errors in the browser").toEqual([]);
    },
    { auto: true },
  ],
});

export { expect };
