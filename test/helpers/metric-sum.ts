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
