// The Express the middleware suites run against. fencekeeper/express
// declares `express ^4.21.0 || ^5.0.0` as its peer, so every express*.test.ts
// file runs once per major: vitest.config.ts has a project per major
// (`express5`, `express4`), and the express4 one sets FK_EXPRESS=4. Express 4
// is installed under the alias `express4` (package.json devDependencies).
//
// Loaded with require(), not import: `express4` has no type declarations of
// its own, and both majors' default export is the same createApplication()
// as far as these tests use it (express(), app.use/get/post/put, json()).
import { createRequire } from 'node:module';
import type expressType from 'express';
import type * as Types from 'express';

const require = createRequire(import.meta.url);

/** The Express major of this run: 4 when FK_EXPRESS=4, else 5. */
export const EXPRESS_MAJOR: 4 | 5 = process.env.FK_EXPRESS === '4' ? 4 : 5;

const PACKAGE = EXPRESS_MAJOR === 4 ? 'express4' : 'express';

/** The Express of this run (express() makes an app, as `import express from 'express'` would). */
export const express = require(PACKAGE) as typeof expressType;

/**
 * An async handler whose rejection reaches the app's error handler, on both
 * majors. Express 5 does that itself (the handler is returned unchanged, so
 * the suites test Express 5's own path); Express 4 ignores the promise a
 * handler returns, so a rejection would be an unhandled one and the request
 * would hang: there the handler is wrapped to pass it to next(error), which
 * is what the README tells Express 4 users to do.
 */
export function forwardRejections(handler: (req: Types.Request, res: Types.Response, next: Types.NextFunction) => Promise<void>): Types.RequestHandler {
  if (EXPRESS_MAJOR === 5) return handler;
  return (req, res, next) => {
    handler(req, res, next).catch(next);
  };
}

/** The types a test names as express.Request etc., as with `import express from 'express'`. */
// eslint-disable-next-line @typescript-eslint/no-namespace -- a type-only namespace beside the value, as the default import gives
export declare namespace express {
  type Express = Types.Express;
  type Request = Types.Request;
  type Response = Types.Response;
  type NextFunction = Types.NextFunction;
  type RequestHandler = Types.RequestHandler;
}

/** The installed version of that Express, e.g. '4.22.3'. */
export const EXPRESS_VERSION = (require(`${PACKAGE}/package.json`) as { version: string }).version;
