import { describe, expect, it } from "vitest";
import { FilterBudgets } from "../../../src/domain/filter-budget.js";

/** The per-event and per-user bounds on what subscription filters may spend (visits), with a given clock. */

describe("FilterBudgets", () => {
  it("gives each event the per-event bound while its user has more than that left", () => {
    const b = new FilterBudgets({ perEvent: 100, perSecondPerUser: 1000 });
    expect(b.allowance("u_a", 0)).toEqual({ visits: 100, limit: "event" });
    b.spend("u_a", 100, 0);
    expect(b.allowance("u_a", 0)).toEqual({ visits: 100, limit: "event" });
  });

  it("charges the emitting user: past a second's worth their events get what is left, then nothing, while another user's are untouched", () => {
    const b = new FilterBudgets({ perEvent: 600, perSecondPerUser: 1000 });
    b.spend("u_a", 600, 0);
    expect(b.allowance("u_a", 0)).toEqual({ visits: 400, limit: "user" });
    // The last step of an evaluation may overrun its allowance: the user owes it.
    b.spend("u_a", 450, 0);
    expect(b.allowance("u_a", 0)).toEqual({ visits: 0, limit: "user" });
    expect(b.allowance("u_b", 0)).toEqual({ visits: 600, limit: "event" });
    // Refilled at the per-second rate, never past one second's worth.
    expect(b.allowance("u_a", 100)).toEqual({ visits: 50, limit: "user" });
    expect(b.allowance("u_a", 700)).toEqual({ visits: 600, limit: "event" });
    b.spend("u_a", 1, 60_000);
    b.spend("u_a", 500, 60_000);
    expect(b.allowance("u_a", 60_000)).toEqual({ visits: 499, limit: "user" });
  });

  it("has no per-user bound at 0", () => {
    const b = new FilterBudgets({ perEvent: 100, perSecondPerUser: 0 });
    for (let i = 0; i < 100; i++) b.spend("u_a", 100, 0);
    expect(b.allowance("u_a", 0)).toEqual({ visits: 100, limit: "event" });
    expect(b.size).toBe(0);
  });

  it("keeps a bounded number of users, dropping full buckets first, then those tracked longest", () => {
    const b = new FilterBudgets({ perEvent: 10, perSecondPerUser: 100 }, 10);
    for (let i = 0; i < 10; i++) b.spend(`u_${i}`, 50, 0);
    expect(b.size).toBe(10);
    // A second later every bucket is full again: all of them go when an eleventh user is charged.
    b.spend("u_new", 50, 1000);
    expect(b.size).toBe(1);
    for (let i = 0; i < 12; i++) b.spend(`u_${i}`, 100, 2000);
    expect(b.size).toBeLessThanOrEqual(10);
    // The last tracked keep their debt; the first were dropped (full again).
    expect(b.allowance("u_11", 2000).visits).toBe(0);
    expect(b.allowance("u_0", 2000)).toEqual({ visits: 10, limit: "event" });
  });
});
