// fencekeeper/s3: entry point (filled in by its adapter issue)
export {};
