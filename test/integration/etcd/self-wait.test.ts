// The self-wait warning on etcd (the cases every queueing source runs: test/helpers/self-wait.ts).
import { etcdSource } from '../../../src/sources/etcd/index.js';
import { selfWaitCases } from '../../helpers/self-wait.js';
import { EtcdPool } from './helpers.js';

const pool = new EtcdPool();
selfWaitCases('etcd', () => etcdSource(pool.client()));
