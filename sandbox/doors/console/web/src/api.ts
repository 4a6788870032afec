// The console's JSON API (/api/v1, served by the daemon through the
// bridge). Errors come back as {"error": {code, message, data: {kind, …}}}.

export class ApiError extends Error {
  constructor(message: string, readonly kind: string, readonly status: number) {
    super(message);
  }
}

async function request<T>(method: string, path: string, body?: unknown): Promise<T> {
  const init: RequestInit = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers = { Accept: "application/json", "Content-Type": "application/json" };
  }
  const resp = await fetch("/api/v1" + path, init);
  let data: unknown;
  try {
    data = await resp.json();
  } catch {
    throw new ApiError(`${method} ${path}: HTTP ${resp.status} without a JSON answer`, "internal", resp.status);
  }
  if (!resp.ok) {
    const e = (data as { error?: { message?: string; data?: { kind?: string } } }).error;
    throw new ApiError(e?.message ?? `${method} ${path}: HTTP ${resp.status}`, e?.data?.kind ?? "internal", resp.status);
  }
  return data as T;
}

export const get = <T>(path: string) => request<T>("GET", path);
export const post = <T>(path: string, body?: unknown) => request<T>("POST", path, body);

// query builds "?k=v&…" from the non-empty values.
export function query(params: Record<string, string | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
  const s = q.toString();
  return s ? "?" + s : "";
}

export interface Peer { uid: number; gid: number; pid?: number }
export interface Whoami { uid: number; gid: number; approver: boolean }

export interface Confirmation {
  id: string;
  session_id: string;
  digest: string;
  reason: string;
  rule: string;
  state: string;
  created: string;
  expires: string;
  requested_by: number;
  decided_by?: Peer;
  decided_at?: string;
  used_at?: string;
  details?: Record<string, string>;
}

export interface ChainStatus { intact: boolean; chains: number; records: number; finding?: string }

export interface AuditRecord {
  seq: number;
  time: string;
  event: string;
  peer?: Peer;
  session_id?: string;
  skill?: { name: string; digest?: string };
  run?: { run_id?: string; script?: string; args?: string[]; duration_ms?: number; exit_code?: number; reason?: string };
  outcome?: string;
  error?: string;
}

export interface AuditSearch { records: AuditRecord[]; matched: number; own_only: boolean; chain: ChainStatus }

export interface HistoryBucket {
  start: string;
  runs: number;
  failures: Record<string, number>;
  p50_ms: number;
  p90_ms: number;
  p99_ms: number;
  egress_attempts: number;
  egress_denied: number;
}

export interface SkillHistory { skill: string; bucket: string; own_only: boolean; buckets: HistoryBucket[] }

export interface Proposal {
  id: string;
  skill: string;
  base_digest: string;
  diff?: string;
  files: string[];
  justification: string;
  evidence?: string;
  state: string;
  session_id?: string;
  proposed_by: Peer;
  created: string;
  decided_by?: Peer;
  decided_at?: string;
  note?: string;
  new_digest?: string;
  lock_updated?: boolean;
}

export interface BackgroundRun {
  run_id: string;
  session_id: string;
  skill?: string;
  path?: string;
  state: string;
  paused?: boolean;
  started: string;
  exit_code?: number;
  signal?: string;
}

export interface LiveRun { run_id: string; session_id?: string; skill?: string; script?: string; uid: number; started: string }
export interface LiveRuns { runs: LiveRun[]; own_only: boolean }

// A live run's output (GET /runs/{run}/output, Server-Sent Events): each
// event is named by its method and carries one of these as JSON.
export interface RunStartedEvent { run_id: string; session_id?: string; skill?: string; path?: string }
export interface RunOutputEvent { run_id: string; stream: "stdout" | "stderr"; seq: number; data: string }
export interface RunOutputDroppedEvent { run_id: string; events: number; bytes: number }
export interface RunExitedEvent { run_id: string; exit_code: number; signal?: string; reason: string; duration_ms: number; error?: string }

export const runOutputURL = (runID: string) => `/api/v1/runs/${encodeURIComponent(runID)}/output`;
