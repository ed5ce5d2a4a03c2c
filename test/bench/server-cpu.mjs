// The benchmarks' servers run in child processes that answer 'cpu' with
// { cpu: microseconds of user + system CPU so far }: ask one.
export function serverCpu(child) {
  return new Promise((resolve) => {
    const onMessage = (message) => {
      if (typeof message?.cpu === 'number') {
        child.off('message', onMessage);
        resolve(message.cpu);
      }
    };
    child.on('message', onMessage);
    child.send('cpu');
  });
}
