export async function writeFromRendering(_a: string, _b: string): Promise<void> { throw new Error("not yet"); }
