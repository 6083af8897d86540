import { describe, expect, it } from "vitest";
import { isUnderPrefix } from "../../../src/domain/path-prefix.js";

describe("isUnderPrefix", () => {
  it.each([
    "/admin",
    "/admin/",
    "/admin/users",
    "/ADMIN/users",
    "/aDmIn/users/u_x/api_key",
    "/%61dmin/users",
    "/%41DMIN",
    "/adm%69n/users",
    "//admin/users",
    "/admin%2Fusers",
  ])("puts %s under /admin", (path) => {
    expect(isUnderPrefix(path, "/admin")).toBe(true);
  });

  it.each(["/", "/administrator", "/admins/users", "/v1/admin/users", "/e/admin", "/adm", "/%zzadmin", "/admin%zz"])(
    "keeps %s out of /admin",
    (path) => {
      expect(isUnderPrefix(path, "/admin")).toBe(false);
    },
  );
});
