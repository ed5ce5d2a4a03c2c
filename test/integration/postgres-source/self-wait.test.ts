// The self-wait warning on the PostgreSQL source (the cases every queueing source runs:
// test/helpers/self-wait.ts); a "client" here is a source, which its grants hang on.
import { selfWaitCases } from '../../helpers/self-wait.js';
import { sourceSchema } from './helpers.js';

const db = sourceSchema('pgsrc_selfwait');
selfWaitCases('postgresSource', () => db.source({}, 3), 200);
