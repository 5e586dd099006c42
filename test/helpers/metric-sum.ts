/** Reads a gateway's /metrics: the sum of a series' samples whose labels include `labels`. */
export async function metric(url: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  return sampleSum(await (await fetch(`${url}/metrics`)).text(), name, labels);
}

/** The sum of a series' samples whose labels include `labels`, in Prometheus text (a scrape, or a registry's text). */
export function sampleSum(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (!Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/**
 * A gateway's counters from now on: `since(name, labels)` reads a series' sum less what it was at this call, so a
 * test on a gateway that earlier tests of its file used reads only what it caused (those tests ran before it).
 */
export async function countersFrom(
  url: string,
): Promise<(name: string, labels?: Record<string, string>) => Promise<number>> {
  const before = await (await fetch(`${url}/metrics`)).text();
  return async (name, labels = {}) => (await metric(url, name, labels)) - sampleSum(before, name, labels);
}
