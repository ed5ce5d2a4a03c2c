// The self-wait warning on ZooKeeper (the cases every queueing source runs: test/helpers/self-wait.ts).
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import { selfWaitCases } from '../../helpers/self-wait.js';
import { StandaloneFile } from '../../helpers/zookeeper-file.js';

const file = new StandaloneFile();
const { server, clients } = file;
selfWaitCases('ZooKeeper', async () => zookeeperSource(await clients.connect(server)));
