import { defineConfig } from 'vitest/config';

// The Express middleware's suites run once per supported Express major
// (fencekeeper/express's peer range is ^4.21.0 || ^5.0.0): the same files in
// two projects, `express5` and `express4`, which FK_EXPRESS tells apart
// (test/integration/express/variants.ts loads that major). Every other file
// runs once, in `fencekeeper`. The output names each file's project:
//   ✓ |express4| test/integration/express/express.test.ts
const EXPRESS_SUITES = ['test/integration/express/**/*.test.ts'];

export default defineConfig({
  test: {
    globalSetup: ['test/setup/global-setup.ts'],
    pool: 'forks',
    // Two cores: more workers only make the ZooKeeper JVMs and the tests fight.
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    testTimeout: 60_000,
    hookTimeout: 120_000,
    teardownTimeout: 60_000,
    projects: [
      {
        extends: true,
        test: {
          name: 'fencekeeper',
          include: ['test/**/*.test.ts'],
          exclude: EXPRESS_SUITES,
          // Type tests (expectTypeOf) live in *.test-d.ts: tsc checks them,
          // nothing runs them. Their own tsconfig keeps that tsc to those files
          // and what they import; the whole project is type-checked by `npm run
          // typecheck`, which test/run-tests.sh runs before vitest.
          typecheck: {
            enabled: true,
            include: ['test/**/*.test-d.ts'],
            tsconfig: 'tsconfig.typetests.json',
          },
        },
      },
      { extends: true, test: { name: 'express5', include: EXPRESS_SUITES, env: { FK_EXPRESS: '5' } } },
      { extends: true, test: { name: 'express4', include: EXPRESS_SUITES, env: { FK_EXPRESS: '4' } } },
    ],
  },
});
