import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Type tests (expectTypeOf) live in *.test-d.ts: tsc checks them, nothing
    // runs them. Their own tsconfig keeps that tsc to those files and what
    // they import; the whole project is type-checked by `npm run typecheck`,
    // which test/run-tests.sh runs before vitest.
    typecheck: {
      enabled: true,
      include: ['test/**/*.test-d.ts'],
      tsconfig: 'tsconfig.typetests.json',
    },
    globalSetup: ['test/setup/global-setup.ts'],
    pool: 'forks',
    // Two cores: more workers only make the ZooKeeper JVMs and the tests fight.
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    testTimeout: 60_000,
    hookTimeout: 120_000,
    teardownTimeout: 60_000,
  },
});
