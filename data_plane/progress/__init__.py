"""Engine progress: is the engine behind an endpoint working, and when has it stopped?

This docstring is the one written model of the rule; docs/reliability.md ("What a breaker
counts") gives its evidence table, and every other module and page points here instead of
restating it. The package holds, from the pure core out: `pace` (an attempt's allowance and gap
limit from the engine's own pace), `stillness` (hang or progress from two counter readings),
`stall` (silence per endpoint over time: the watch), and the I/O around them, `stall_guard`
(the watch on one loop timer, ending attempts) and `engine_probe` (one bounded read of an
engine's token counters). It may import `upstream`, `sync` (the page reader and scrape target),
`domain`, `outcome` and `settings`; `serving` and the composition roots import it.

An attempt *waits* on its endpoint from when it is sent until its first progress:
a stream's first chunk, or a non-streamed answer's whole body. Each waiting attempt has an
*allowance*, the engine's own pace for its work (`EnginePace.allowance_s`: its profiled time for
the first byte, or for the longest answer the request allows, at its load, x the slowdown the
endpoint has lately shown, x a margin); past it the attempt is *overdue*. The endpoint's
*silence* is the time since its last byte on ANY attempt (a first chunk, a later chunk, a whole
answer) during which at least one of its waiting attempts was overdue. The window W = max(
`stall_window_s`, the longest allowance among its overdue attempts, the longest first-token
allowance among all its waiting attempts: a prefill in progress, which sends no byte to
anyone). Each time the silence
reaches a further multiple of W (W, 2W, 3W, ...) the endpoint *stalls*: that is ONE
observation, however many attempts wait (they all wait on the same silence), so it counts once
against the endpoint's breaker (`take_stalls`: one failure), and from `open_windows` x W on it
opens the breaker at once (a silence that long is a hang, not a slow engine); at each stall its
overdue attempts that have somewhere else to go (`begin(..., movable=True)`: the proxy's next
candidate fits in the client's deadline) are ended as lack of progress; the others keep waiting
until the client's own limit, so an engine that is the request's only choice answers late
rather than not at all, unless the silence reaches the hang (`open_windows` x W): then every
overdue attempt ends, since waiting on a hung engine only holds the client until its deadline.
A byte on any attempt ends the episode (silence and count start again).

Why this is evidence about the engine and not about a request or a client:
- a byte on any attempt resets the silence: an endpoint working on other requests (its queue,
  other clients' long answers, cores shared with other engines) is slow for this one, a
  latency fact (load, pace, feedback), never lack of progress;
- silence counts only past an attempt's allowance, so a client's budget that ends attempts
  early (a TTFT budget, a request deadline) adds nothing, whoever sends it and however often;
- silence adds up across attempts (it resets only with a byte), so a hung engine behind
  clients whose deadlines end each attempt before W is still caught;
- W scales with the work owed (the longest overdue allowance), so a uniformly slower engine is
  tolerated up to about 2 x factor x its profile before its pace is even known, and the pace
  it then shows (`EnginePace`) widens the allowances further;
- W is at least the first-token allowance of every attempt waiting there, overdue or not: an
  engine prefilling a long prompt (its allowance from the prompt's full size,
  `request.prompt_size`, and the pair's TTFT line) sends no byte to anyone on an engine that
  runs the prefill in one step, so its neighbours' overdue silence is not counted against it
  before that prefill could be done. What a client can do with it: a prompt at the context
  limit delays the ejection of a truly hung engine by that prompt's allowance (16.5 s for
  32k tokens on the shipped 70B pairs), never for ordinary prompts (under the floor).
What else could explain a stall: an engine that gives no byte to anyone for that long while
working (a batch of long non-streamed answers on an engine that cannot fit one more request,
a preemption storm), or bytes we did not see (another replica's attempts). The window's floor
and the allowance of the work owed are what such an engine gets; a hung or dead-but-listening
engine gives nothing: its breaker opens after `open_windows` x W of silence (allowance + 3W at
the defaults), or after K stalls in a row with no answer between them.

Sooner with the engine's own counters (`still_windows` > 0, set by the guard when it has a
probe): while some attempt is overdue the guard reads the endpoint's token counters
(`probes_due`, one read in flight per endpoint), first when an attempt becomes overdue, then
each time our attempts waited there one more window (max(floor, the longest first-token
allowance among them)), with no byte meanwhile (a byte starts over; time nothing waited does
not count: the engine may have been idle). Counters that stood still, or probes without an
answer (`progress.stillness`), across `still_windows` such windows are the hang: the breaker
opens and every overdue attempt ends, as at `open_windows` x W (`read`). Counters that moved
between the episode's last two readings say it works, for someone (known one window in, long
before the windows' hang at `open_windows` x W could take it for one): its stalls then count
nothing and never hang (the premise of both, an engine giving no one anything, is refuted),
while its overdue attempts with somewhere else to go still move on at each window. No counters
to read leave the windows' rules as they are.
"""
