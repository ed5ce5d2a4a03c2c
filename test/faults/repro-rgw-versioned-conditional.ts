// Reproduction (run: S3_ENDPOINT=<the RGW endpoint, e.g. what test/servers/rgw.sh acquire prints>
//   node node_modules/vite-node/vite-node.mjs test/faults/repro-rgw-versioned-conditional.ts):
// on a bucket with versioning enabled, RGW 16 does not honour conditional PUTs:
// If-None-Match: * on an existing key answers 200 (a second "create" overwrites),
// and If-Match with the current ETag (unquoted) answers 412. So fencedPutObject
// on a versioned bucket writes a new key once and then fails every write with
// UnknownOutcomeError after maxAttempts 412s. (Why the fault checker orders S3
// writes by the chain of preconditions instead of listing object versions.)
// Exit 0 when RGW honours both conditions, 1 otherwise.
import {
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  HeadObjectCommand,
  ListObjectVersionsCommand,
  PutBucketVersioningCommand,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { fencedPutObject } from '../../adapters/s3/index.js';
import { scriptServers } from './script-servers.js';

const { endpoint, region, credentials } = scriptServers().s3; // S3_ENDPOINT is required
const s3 = new S3Client({ endpoint, region, forcePathStyle: true, maxAttempts: 1, credentials });
const Bucket = `fk-versioned-${process.pid}-${Date.now().toString(36)}`;
const Key = 'k';

async function put(body: string, header: Record<string, string>): Promise<number> {
  const command = new PutObjectCommand({ Bucket, Key, Body: body });
  command.middlewareStack.add((next) => async (args) => {
    Object.assign((args.request as { headers: Record<string, string> }).headers, header);
    return next(args);
  }, { step: 'build' });
  try {
    await s3.send(command);
    return 200;
  } catch (error) {
    return (error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode ?? -1;
  }
}

await s3.send(new CreateBucketCommand({ Bucket }));
await s3.send(new PutBucketVersioningCommand({ Bucket, VersioningConfiguration: { Status: 'Enabled' } }));
let ok = true;
try {
  console.log('PUT If-None-Match: * (new key):', await put('a', { 'if-none-match': '*' }));
  const second = await put('b', { 'if-none-match': '*' });
  console.log('PUT If-None-Match: * (existing key, expect 412):', second);
  ok &&= second === 412;
  const etag = ((await s3.send(new HeadObjectCommand({ Bucket, Key }))).ETag ?? '').replace(/"/g, '');
  const matching = await put('c', { 'if-match': etag });
  console.log('PUT If-Match: <current ETag> (expect 200):', matching);
  ok &&= matching === 200;
  try {
    await fencedPutObject(s3, { Bucket, Key, Body: 'd', token: 5n }, { maxAttempts: 3 });
    console.log('fencedPutObject: ok');
  } catch (error) {
    ok = false;
    console.log(`fencedPutObject: ${(error as { code?: string }).code ?? ''} ${(error as Error).message}`);
  }
} finally {
  const versions = await s3.send(new ListObjectVersionsCommand({ Bucket }));
  for (const v of [...(versions.Versions ?? []), ...(versions.DeleteMarkers ?? [])]) {
    await s3.send(new DeleteObjectCommand({ Bucket, Key: v.Key, VersionId: v.VersionId }));
  }
  await s3.send(new DeleteBucketCommand({ Bucket }));
}
console.log(ok ? 'conditional PUTs honoured on a versioned bucket' : 'RGW ignores/mis-evaluates conditional PUTs on a versioned bucket');
process.exit(ok ? 0 : 1);
