//! Prints the layout contract as JSON (what `nixos-modules/layout.json` holds).
fn main() {
    print!("{}", layout::Contract::get().to_json());
}
