import { InvalidArgumentError } from '../../errors.js';

/**
 * ZooKeeper's path rules (PathUtils.validatePath): absolute, no trailing
 * slash (except the root), no empty, '.' or '..' segments, and none of the
 * characters the server refuses (NUL, control characters, surrogates and the
 * private-use and specials ranges). Checked on the client so a bad path is a
 * clear InvalidArgumentError, not a round trip ending in BADARGUMENTS.
 */
export function validatePath(path: string, sequential = false): void {
  // Every request validates its path: a valid one is confirmed in one pass
  // without allocating; anything else takes the checks below, in order, for
  // the message that names the first problem.
  if (typeof path === 'string' && isValidPath(path, sequential)) return;
  explainInvalidPath(path, sequential);
}

/** One pass over the path: segments non-empty, not '.' or '..', every character allowed. */
function isValidPath(path: string, sequential: boolean): boolean {
  const length = path.length;
  if (length === 0 || path.charCodeAt(0) !== 0x2f) return false;
  if (length === 1) return true;
  // A sequential create may end with '/': the server appends the counter.
  const end = sequential && path.charCodeAt(length - 1) === 0x2f ? length - 1 : length;
  let segmentStart = 1;
  for (let i = 1; i <= end; i++) {
    const c = i === end ? 0x2f : path.charCodeAt(i);
    if (c === 0x2f) {
      const n = i - segmentStart;
      if (n === 0) return false;
      if (path.charCodeAt(segmentStart) === 0x2e && (n === 1 || (n === 2 && path.charCodeAt(segmentStart + 1) === 0x2e))) return false;
      segmentStart = i + 1;
    } else if (c < 0x20 || (c > 0x7e && c < 0xa0) || (c > 0xd7ff && c < 0xf900) || (c > 0xffef && c <= 0xffff)) {
      return false;
    }
  }
  return true;
}

function explainInvalidPath(path: string, sequential: boolean): void {
  if (typeof path !== 'string') throw new InvalidArgumentError(`path must be a string, got ${typeof path}`);
  if (path.length === 0) throw new InvalidArgumentError('path must not be empty');
  if (path[0] !== '/') throw new InvalidArgumentError(`path must start with '/': ${JSON.stringify(path)}`);
  // The root is valid, and so is a sequential create of '/' (the server appends the counter).
  if (path.length === 1) return;
  // A sequential create may end with '/': the server appends the counter.
  const checked = sequential && path.endsWith('/') ? path.slice(0, -1) : path;
  if (checked.endsWith('/')) throw new InvalidArgumentError(`path must not end with '/': ${JSON.stringify(path)}`);
  const segments = checked.split('/');
  for (let i = 1; i < segments.length; i++) {
    const segment = segments[i] as string;
    if (segment.length === 0) throw new InvalidArgumentError(`empty segment in path ${JSON.stringify(path)}`);
    if (segment === '.' || segment === '..') throw new InvalidArgumentError(`relative segment '${segment}' in path ${JSON.stringify(path)}`);
  }
  for (let i = 0; i < checked.length; i++) {
    const c = checked.charCodeAt(i);
    if (c === 0) throw new InvalidArgumentError(`NUL character in path at index ${i}`);
    if ((c > 0x00 && c < 0x20) || (c > 0x7e && c < 0xa0) || (c > 0xd7ff && c < 0xf900) || (c > 0xffef && c <= 0xffff)) {
      throw new InvalidArgumentError(`invalid character U+${c.toString(16).padStart(4, '0')} in path at index ${i}`);
    }
  }
}

/** One server of a connect string: host and port. */
export interface ServerAddress { readonly host: string; readonly port: number }

export interface ConnectString {
  readonly servers: readonly ServerAddress[];
  /** Chroot prefix without a trailing slash, or '' for none. */
  readonly chroot: string;
}

/**
 * 'h1:2181,h2:2181[/chroot]' (port defaults to 2181; IPv6 in brackets), or
 * the same as a URL, 'zookeeper://h1:2181,h2:2181[/chroot]', the form the CLI
 * takes: hosts and an optional chroot, nothing else.
 */
export function parseConnectString(input: string): ConnectString {
  if (typeof input !== 'string' || input.trim() === '') {
    throw new InvalidArgumentError('connectString must be a non-empty string like "127.0.0.1:2181"');
  }
  const text = withoutScheme(input);
  const slash = text.indexOf('/');
  const hostPart = slash === -1 ? text : text.slice(0, slash);
  let chroot = slash === -1 ? '' : text.slice(slash);
  if (chroot === '/') chroot = '';
  if (chroot !== '') validatePath(chroot);
  const servers: ServerAddress[] = [];
  for (const raw of hostPart.split(',')) {
    const entry = raw.trim();
    if (entry === '') continue;
    let host: string;
    let portText: string | undefined;
    if (entry.startsWith('[')) {
      const close = entry.indexOf(']');
      if (close === -1) throw new InvalidArgumentError(`bad IPv6 address in connect string: ${entry}`);
      host = entry.slice(1, close);
      const rest = entry.slice(close + 1);
      portText = rest.startsWith(':') ? rest.slice(1) : rest === '' ? undefined : rest;
    } else {
      const colon = entry.lastIndexOf(':');
      host = colon === -1 ? entry : entry.slice(0, colon);
      portText = colon === -1 ? undefined : entry.slice(colon + 1);
      // An IPv6 address must be bracketed: '::1' would otherwise read as host ':' port 1.
      if (host.includes(':')) throw new InvalidArgumentError(`IPv6 addresses need brackets in a connect string ("[::1]:2181"): ${JSON.stringify(entry)}`);
    }
    const port = portText === undefined ? 2181 : Number(portText);
    if (host === '' || !Number.isInteger(port) || port < 1 || port > 65535 || (portText !== undefined && !/^[0-9]+$/.test(portText))) {
      throw new InvalidArgumentError(`bad server address in connect string: ${JSON.stringify(entry)}`);
    }
    servers.push({ host, port });
  }
  if (servers.length === 0) throw new InvalidArgumentError(`no server in connect string ${JSON.stringify(text)}`);
  return { servers, chroot };
}

const SCHEME = /^([a-z][a-z0-9+.-]*):\/\//i;

/** The connect string inside a zookeeper:// URL; a plain connect string as it is. */
function withoutScheme(text: string): string {
  const scheme = SCHEME.exec(text);
  if (scheme === null) return text;
  if (scheme[1]!.toLowerCase() !== 'zookeeper') {
    throw new InvalidArgumentError(`connectString ${JSON.stringify(text)}: a ${scheme[1]}:// URL is not a ZooKeeper address; write "zookeeper://host:port[,host:port][/chroot]" or "host:port[,host:port][/chroot]"`);
  }
  const rest = text.slice(scheme[0].length);
  if (/[@?#]/.test(rest)) {
    throw new InvalidArgumentError(`connectString ${JSON.stringify(text)}: a zookeeper:// URL carries hosts and an optional chroot only (no credentials, query or fragment; pass auth in the client's options)`);
  }
  // 'zookeeper://h:2181/' is the root: no chroot.
  return rest.endsWith('/') ? rest.slice(0, -1) : rest;
}

export function joinPath(parent: string, child: string): string {
  return parent === '/' ? `/${child}` : `${parent}/${child}`;
}

/**
 * A chroot ('/app' in 'h:2181/app'): the client's paths are relative to it.
 * Requests carry server paths and replies are mapped back, so a caller never
 * sees the prefix.
 */
export class Chroot {
  /** Without a trailing slash; '' for none. */
  readonly prefix: string;

  constructor(prefix: string) {
    this.prefix = prefix;
  }

  toServer(path: string): string {
    if (this.prefix === '') return path;
    return path === '/' ? this.prefix : this.prefix + path;
  }

  fromServer(path: string): string {
    if (this.prefix === '') return path;
    if (path === this.prefix) return '/';
    return path.startsWith(`${this.prefix}/`) ? path.slice(this.prefix.length) : path;
  }
}
