// fencekeeper/express: entry point (filled in by its adapter issue)
export {};
