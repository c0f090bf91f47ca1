import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** One mail as written to the mailbox. */
export interface Mail {
  to: string;
  subject: string;
  body: string;
}

/**
 * A mailbox directory standing in for an email API: one file per mail, named after the key (the
 * outbox message id). The file is created exclusively (`wx`), so a second delivery of the same
 * message finds it there and sends nothing — the file system plays the provider's idempotency key.
 */
export class Mailbox {
  readonly dir: string;

  constructor(dir: string) {
    this.dir = dir;
  }

  /** Writes the mail; returns false when a mail with this key was already delivered. */
  async deliver(key: string, mail: Mail): Promise<boolean> {
    // The key becomes a file name: refuse anything that could leave the directory.
    if (!/^[A-Za-z0-9_-]{1,128}$/.test(key))
      throw new Error(`invalid mail key ${JSON.stringify(key)}`);
    await mkdir(this.dir, { recursive: true });
    const text = `To: ${mail.to}\nSubject: ${mail.subject}\n\n${mail.body}\n`;
    try {
      await writeFile(join(this.dir, `${key}.eml`), text, { flag: 'wx' });
      return true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw error;
    }
  }

  /** Delivered mails, sorted by file name. */
  async list(): Promise<(Mail & { key: string })[]> {
    let names: string[];
    try {
      names = (await readdir(this.dir)).filter((name) => name.endsWith('.eml')).sort();
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw error;
    }
    return Promise.all(
      names.map(async (name) => {
        const [head = '', body = ''] = (await readFile(join(this.dir, name), 'utf8')).split('\n\n');
        const field = (label: string) =>
          head
            .split('\n')
            .find((line) => line.startsWith(`${label}: `))
            ?.slice(label.length + 2) ?? '';
        return {
          key: name.slice(0, -4),
          to: field('To'),
          subject: field('Subject'),
          body: body.trimEnd(),
        };
      }),
    );
  }
}
