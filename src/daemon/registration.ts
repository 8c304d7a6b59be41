import { BUILD } from '../build-id.js';
import type { Config } from '../config/schema.js';
import type { LedgerArea } from '../fs/ledger-area.js';
import { release } from '../holder/client.js';
import { removeStored, storeRegistration } from '../holder/fdstore.js';
import { HolderLink } from '../holder/link.js';
import { journalEpoch, journalFds, openJournal, type JournalRaw } from '../journal-fds.js';
import type { Logger } from '../log.js';
import type { SessionRaw } from './session.js';

/**
 * Crash survival: the node table is journaled (a resumed session journals
 * on where its predecessor did) and the holder (under systemd: its fd
 * store) keeps a copy of the session from now on, dropping its copies of
 * the registration before (a predecessor's included). As soon as the session
 * serves and the socket directory exists: a crash before the registration
 * ends the session as before crash survival.
 */
export class SessionRegistration {
  /** with whom the session is registered: nobody (false) unless crashSurvival is on and it worked */
  registered: 'holder' | 'systemd' | false = false;
  /** With a holder process: registered again whenever the one it registered with goes (link.ts). */
  link: HolderLink | null = null;

  constructor(
    private readonly raw: SessionRaw,
    private readonly config: Config,
    /** systemd's notify socket: its fd store keeps the session (a holder process would die with the unit's cgroup) */
    private readonly sdNotify: string | null,
    private readonly log: Logger,
  ) {}

  /** Register the session (when the configuration asks for crash survival); a failure is logged: a crash then ends the session. */
  async register(s: { configPath: string | null; generation: number; resumed: boolean; journalRaw: JournalRaw; ledgers: LedgerArea | null }): Promise<void> {
    if (!this.config.crashSurvival) return;
    const hlog = this.log.child({ component: 'holder' });
    const session = this.raw.hs_handover_holder_session();
    try {
      if (session === null) throw new Error('the session has no descriptor or INIT to hand over');
      if (!s.resumed) openJournal(s.journalRaw);
      const args = { configPath: s.configPath, generation: s.generation, epoch: journalEpoch(s.journalRaw), build: BUILD, session, journalFds: [...journalFds(), ...(s.ledgers ? [s.ledgers.fd] : [])] };
      if (this.sdNotify !== null) {
        storeRegistration(this.raw, this.sdNotify, this.config, args);
        this.registered = 'systemd';
        hlog.info({ notifySocket: this.sdNotify, generation: s.generation }, "session stored in systemd's fd store");
      } else {
        this.link = new HolderLink(this.raw, this.config, args, hlog);
        await this.link.start();
        this.registered = 'holder';
      }
    } catch (err) {
      hlog.error({ err: (err as Error).message }, 'the session is not registered with a holder or systemd\'s fd store: a crash of this daemon ends it');
    }
  }

  /** A plain stop leaves no holder behind (a handover never comes here: its successor registers instead). */
  async withdraw(): Promise<void> {
    await this.link?.stop();
    if (this.registered === 'holder' && this.link?.registered) await release(this.raw, this.config).catch((err: Error) => this.log.warn({ err: err.message }, 'the session holder could not be released'));
    if (this.registered === 'systemd' && this.sdNotify !== null) {
      try {
        removeStored(this.raw, this.sdNotify);
      } catch (err) {
        this.log.warn({ err: (err as Error).message }, "the session could not be removed from systemd's fd store");
      }
    }
  }
}
