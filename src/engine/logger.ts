/** The logging the engine modules need; a pino logger fits it. */
export interface EngineLogger {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
  error(fields: Record<string, unknown>, message: string): void;
}

export const silentLogger: EngineLogger = { info() {}, warn() {}, error() {} };
