"""Commands on branches and tags: ``branch``, ``tag``, ``checkout``, ``merge``, ``revert``, ``reset``."""

from __future__ import annotations

import click
from rich.markup import escape

from engram.cli._common import author_option, friendly, message_option, opened_url, out, print_commit, store_of
from engram.store.connect import check_out, checkout_path

_strategy = click.option(
    "--strategy",
    type=click.Choice(["fail", "ours", "theirs", "newest"]),
    default="fail",
    show_default=True,
    help="How to decide items both sides changed: fail (write nothing and list each conflict with its base, "
    "ours and theirs values), ours, theirs, or newest (the later write wins).",
)


@click.command()
@click.argument("name", required=False)
@click.option("--at", "at", default="HEAD", show_default=True, help="Where a new branch starts (any ref).")
@click.option("--delete", "-d", is_flag=True, help="Delete branch NAME.")
@click.pass_context
@friendly
def branch(ctx: click.Context, name: str | None, at: str, delete: bool) -> None:
    """List branches, create branch NAME at a ref, or delete it (-d)."""
    if name is None:
        if delete:
            raise click.UsageError("branch -d needs the NAME of the branch to delete")
        mem = store_of(ctx)
        for b, cid in mem.branches().items():
            out.print(f"{'*' if b == mem.branch else ' '} {escape(b)} [yellow]{cid[:10]}[/yellow]")
        return
    mem = store_of(ctx)
    if delete:
        was = mem.branches().get(name)
        mem.delete_branch(name)
        out.print(f"deleted branch {escape(name)}" + (f" (was {was[:10]})" if was else ""))
    else:
        mem.create_branch(name, at)
        out.print(f"created branch {escape(name)} at {mem.resolve(name).short_id}")


@click.command()
@click.argument("name", required=False)
@click.option("--at", "at", default="HEAD", show_default=True, help="The version to name.")
@click.option("--delete", "-d", is_flag=True, help="Delete tag NAME.")
@click.pass_context
@friendly
def tag(ctx: click.Context, name: str | None, at: str, delete: bool) -> None:
    """List tags, name the version --at (default HEAD) NAME, or delete tag NAME (-d)."""
    mem = store_of(ctx)
    if name is None:
        if delete:
            raise click.UsageError("tag -d needs the NAME of the tag to delete")
        for t, cid in mem.tags().items():
            out.print(f"{escape(t)} [yellow]{cid[:10]}[/yellow]")
        return
    if delete:
        was = mem.tags().get(name)
        mem.delete_tag(name)
        out.print(f"deleted tag {escape(name)}" + (f" (was {was[:10]})" if was else ""))
        return
    mem.tag(name, at)
    out.print(f"tagged {mem.resolve(name).short_id} as {escape(name)}")


@click.command()
@click.argument("name")
@click.option("-b", "create", is_flag=True, help="Create branch NAME first.")
@click.option("--at", "at", default="HEAD", show_default=True, help="Where a branch created with -b starts.")
@click.pass_context
@friendly
def checkout(ctx: click.Context, name: str, create: bool, at: str) -> None:
    """Make NAME the branch later commands read and write (remembered beside the store)."""
    mem = store_of(ctx)
    url = opened_url(ctx)
    if checkout_path(url) is None:
        raise click.UsageError("this store keeps no checkout (no local file): pass --branch or ENGRAM_BRANCH")
    if create:
        mem.create_branch(name, at)
    elif name not in mem.branches():
        raise click.UsageError(f"no branch {name!r} (create it with: engram checkout -b {name})")
    check_out(mem, url, name)
    out.print(f"on branch [bold]{escape(name)}[/bold] at [yellow]{mem.resolve(name).short_id}[/yellow]")


@click.command()
@click.argument("source")
@_strategy
@author_option
@message_option
@click.pass_context
@friendly
def merge(ctx: click.Context, source: str, strategy: str, author: str | None, message: str | None) -> None:
    """Merge branch or version SOURCE into --branch with a two-parent commit (nothing new: no commit).

    A conflict (an item both sides changed differently) stops the merge with --strategy fail, which
    writes nothing and lists each conflict with its base, ours and theirs values.
    """
    mem = store_of(ctx)
    done = mem.merge_outcome(source, strategy=strategy, author=author, message=message)  # type: ignore[arg-type]
    if done.up_to_date:
        out.print(f"already up to date: {escape(mem.branch)} has everything in {escape(source)}")
        return
    out.print(f"[green]{done.commit.short_id}[/green] {escape(done.commit.message)}")


@click.command()
@click.argument("ref")
@_strategy
@author_option
@message_option
@click.pass_context
@friendly
def revert(ctx: click.Context, ref: str, strategy: str, author: str | None, message: str | None) -> None:
    """Undo what commit REF changed, with a new commit (later changes to the same items are conflicts)."""
    mem = store_of(ctx)
    before = mem.head.id
    commit = mem.revert(ref, strategy=strategy, author=author, message=message)  # type: ignore[arg-type]
    print_commit(commit, before, f"nothing to revert: {escape(mem.branch)} already lacks what {escape(ref)} changed")


@click.command()
@click.argument("ref")
@author_option
@message_option
@click.pass_context
@friendly
def reset(ctx: click.Context, ref: str, author: str | None, message: str | None) -> None:
    """Move --branch to version REF (no commit: the move, its author and message go in the reflog)."""
    mem = store_of(ctx)
    before = mem.head.id
    mem.reset(ref, author=author, message=message)
    if mem.head.id == before:
        out.print(f"nothing to do: {escape(mem.branch)} is already at {mem.head.short_id}")
        return
    out.print(f"{escape(mem.branch)} is now at {mem.head.short_id} (was {before.hex()[:10]}; see `engram reflog`)")


COMMANDS = [branch, tag, checkout, merge, revert, reset]
