// Placeholder until the server scripts land: tests read the servers from the
// environment (FK_ZK_STANDALONE, FK_ZK_ENSEMBLE, DATABASE_URL, S3_ENDPOINT, ...).
export default function setup(): void {}
