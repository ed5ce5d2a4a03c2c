// Which Express this project's middleware suites ran against: the express4
// and express5 projects (vitest.config.ts) must each load their own major,
// or one of the two runs would silently test the other.
import { describe, expect, it } from 'vitest';
import { EXPRESS_MAJOR, EXPRESS_VERSION, express } from './variants.js';
import { post, serve } from './helpers.js';

describe(`the Express of this run (${EXPRESS_VERSION})`, () => {
  it('is the major its project is named after, and serves a request', async ({ task }) => {
    // The projects are express4 and express5 (vitest.config.ts).
    const project = task.file.projectName ?? '';
    expect(project).toMatch(/^express[45]$/);
    expect(EXPRESS_MAJOR, `the Express loaded in project ${project}`).toBe(Number(project.slice(-1)));
    expect(Number(EXPRESS_VERSION.split('.')[0])).toBe(EXPRESS_MAJOR);
    // Express 4 still has the deprecated app.del, which Express 5 removed:
    // the code loaded is that major's, not only its package.json.
    const app = express();
    expect('del' in app).toBe(EXPRESS_MAJOR === 4);
    app.post('/major', (_req, res) => {
      res.json({ major: EXPRESS_MAJOR });
    });
    const served = await serve(app);
    try {
      const answer = await post(served.port, '/major');
      expect(answer.status).toBe(200);
      expect(answer.body).toEqual({ major: EXPRESS_MAJOR });
    } finally {
      await served.close();
    }
  });
});
